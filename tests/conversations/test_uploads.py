"""Upload parsing: type detection, text decoding, PDF extraction and failure reasons."""

from __future__ import annotations

import pytest

from ragengine.conversations.uploads import ParseError, decode_text, detect_kind, extract, split_parts
from ragengine.errors import UnsupportedMediaType


def make_pdf(pages: list[str]) -> bytes:
    """A small valid PDF with one text line per page (Helvetica), xref offsets computed."""
    objs = ["<< /Type /Catalog /Pages 2 0 R >>", None, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {len(objs)} 0 R "
                    f"/Resources << /Font << /F1 3 0 R >> >> >>")
        kids.append(f"{len(objs)} 0 R")
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


@pytest.mark.parametrize("data, name, ctype, kind", [
    (b"PK\x03\x04", "a.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "docx"),
    (b"PK\x03\x04", "deck", "application/vnd.openxmlformats-officedocument.presentationml.presentation", "pptx"),
    (b"PK\x03\x04", "a.xlsx", "application/octet-stream", "xlsx"),
    (b"a,b\n1,2", "a.csv", "text/csv", "csv"),
    (b"\x89PNG\r\n\x1a\n", "scan", "application/octet-stream", "image"),
    (b"\xff\xd8\xff\xe0", "a.jpg", "image/jpeg", "image"),
    (b"hello", "a.txt", "text/plain", "text"),
    (b"# T", "a.md", "application/octet-stream", "markdown"),
    (b"# T", "notes", "text/markdown", "markdown"),
    (b"%PDF-1.4 ...", "scan.bin", "application/octet-stream", "pdf"),
    (b"x", "a.pdf", None, "pdf"),
])
def test_detect_kind(data, name, ctype, kind):
    assert detect_kind(data, name, ctype) == kind


@pytest.mark.parametrize("data, name, ctype", [
    (b"PK\x03\x04", "a.zip", "application/zip"),
    (b"MZ\x90\x00", "a.exe", "application/x-msdownload"),
    (b"\x00\x01\x02binary", "a.txt", "text/plain"),
])
def test_unsupported_types_are_415(data, name, ctype):
    with pytest.raises(UnsupportedMediaType):
        detect_kind(data, name, ctype)


def test_decode_text_handles_boms_and_legacy_encodings():
    assert decode_text("héllo".encode("utf-8-sig")) == "héllo"
    assert decode_text("héllo".encode("utf-16")) == "héllo"
    assert decode_text("héllo".encode("cp1252")) == "héllo"


def test_split_parts_is_paragraph_aligned_and_complete():
    text = "\n\n".join(f"paragraph {i} " + "word " * 50 for i in range(100))
    parts = split_parts(text, size=2000)
    assert len(parts) > 5 and all(len(p) <= 2000 for p in parts)
    assert "".join(parts).replace("\n", "") == text.strip().replace("\n", "")


def test_pdf_pages_are_extracted_with_page_numbers():
    full, parts = extract(make_pdf(["Alpha page text", "Beta page text"]), "pdf")
    assert [p.metadata["page"] for p in parts] == [1, 2]
    assert "Alpha page text" in parts[0].text and "[page 2]" in full


@pytest.mark.parametrize("data, reason", [
    (b"%PDF-1.4\nthis is not really a pdf", "could not be read"),
    (make_pdf(["Alpha"])[:120], "could not be read"),
    (make_pdf([""]), "no extractable text"),
])
def test_broken_pdfs_raise_parse_error_with_reason(data, reason):
    with pytest.raises(ParseError, match=reason):
        extract(data, "pdf")


def test_empty_text_file_is_a_parse_error():
    with pytest.raises(ParseError, match="empty"):
        extract(b"   \n", "text")
