"""Documents as teams have them (issue 29): the generated corpus (tests/support/corpus.py) through the
one extractor and the bounded parser, table-aware chunks, and retrieval of a table cell's row."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from ragengine.filetypes import Extracted, Skipped, to_document
from ragengine.index.chunking import Chunker, table_blocks
from ragengine.index.types import ChunkingConfig
from ragengine.parsing.limits import ParseLimits
from tests.support import corpus

HEADER = "| " + " | ".join(corpus.TABLE_HEADER) + " |"


def row_line(i: int) -> str:
    return "| " + " | ".join(corpus.TABLE[i]) + " |"


@pytest.fixture(scope="module")
def extracted() -> dict[str, Extracted]:
    out = {}
    for name, data in corpus.corpus().items():
        found = to_document(name, data)
        assert isinstance(found, Extracted), (name, found)
        out[name] = found
    return out


@pytest.mark.parametrize("name, rows, expect", [
    ("prices.docx", 30, ["## Prices by region", corpus.INTRO, "- Delivery terms\n- Payment terms", "### The table",
                         corpus.CAPTION, "Prices exclude VAT."]),
    ("prices.pptx", 7, ["# Slide 1: Season overview", corpus.INTRO, "Notes: Mention the new Baltic warehouse.",
                        "# Slide 2: Prices by region"]),
    ("prices.xlsx", 30, ["# Sheet: Prices", "# Sheet: Notes", "| Currency | EUR |"]),
    ("prices.csv", 30, []),
    ("prices.pdf", 15, [corpus.SECTION, corpus.INTRO, corpus.CAPTION]),
])
def test_text_and_tables_match_the_known_content(extracted, name, rows, expect):
    found = extracted[name]
    lines = found.text.split("\n")
    assert HEADER in lines, found.text[:500]
    for i in range(1, rows + 1):
        assert row_line(i) in lines, (name, i)
    assert row_line(rows + 1) not in lines if rows < 30 else True
    for piece in expect:
        assert piece in found.text, (name, piece)
    # the table is one block whose first row is the header
    start, end = table_blocks(found.text)[0]
    assert found.text[start:end].split("\n")[0] == HEADER


def test_sections_and_metadata(extracted):
    assert extracted["prices.docx"].metadata == {"format": "docx", "title": corpus.DOC_TITLE}
    assert [m for _, m in extracted["prices.pptx"].sections] == [
        {"slide": 1, "slide_title": "Season overview"}, {"slide": 2, "slide_title": corpus.SECTION}]
    assert [m for _, m in extracted["prices.xlsx"].sections] == [{"sheet": "Prices"}, {"sheet": "Notes"}]
    assert [m for _, m in extracted["prices.pdf"].sections] == [{"page": 1}]
    assert "ocr_pages" not in extracted["prices.pdf"].metadata  # a text layer is never OCR'd


@pytest.mark.parametrize("name", ["scan.png", "scan.pdf"])
def test_scanned_pages_are_read_by_ocr(extracted, name):
    found = extracted[name]
    assert found.metadata["ocr_pages"] == 1
    words = found.text.split()
    for line in corpus.SCANNED_TEXT:
        assert all(w in words for w in line.split()), (line, found.text)


def test_only_pages_without_a_text_layer_are_ocrd():
    found = to_document("mixed.pdf", corpus.mixed_pdf_bytes())
    assert isinstance(found, Extracted) and found.metadata["ocr_pages"] == 1
    assert found.text.startswith(f"[page 1]\n\n{corpus.INTRO}\n\n[page 2]\n\n") and "twelve crates" in found.text


def test_ocr_page_and_time_caps_and_languages():
    three = corpus.scanned_pdf_bytes(pages=3)
    capped = to_document("scan.pdf", three, limits=ParseLimits(ocr_max_pages=2))
    assert isinstance(capped, Skipped) and capped.over_limit and "3 scanned pages to OCR" in capped.reason
    late = to_document("scan.png", corpus.png_bytes(), limits=ParseLimits(ocr_s=0))
    assert isinstance(late, Skipped) and late.over_limit and "OCR took longer than 0 s" in late.reason
    unknown = to_document("scan.png", corpus.png_bytes(), limits=ParseLimits(ocr_languages="xyz"))
    assert isinstance(unknown, Skipped) and not unknown.over_limit and "'xyz'" in unknown.reason


@pytest.mark.parametrize("name, reason, over", [
    ("truncated.docx", "not a valid archive (truncated or corrupt)", False),
    ("truncated.xlsx", "not a valid archive (truncated or corrupt)", False),
    ("bomb.docx", "the archive would unpack to 600 MiB (the limit is 512 MiB)", True),
    ("members.pptx", "20000 archive members (the limit is 10000)", True),
    ("locked.pdf", "the PDF is encrypted with a password", False),
    ("garbage.pdf", "the PDF could not be read", False),
    ("password.docx", "encrypted (password-protected) or in the legacy binary format", False),
    ("noise.png", "the image could not be read", False),
])
def test_broken_and_hostile_files_give_a_reason_and_nothing_else(name, reason, over):
    found = to_document(name, corpus.broken()[name])
    assert isinstance(found, Skipped) and found.over_limit == over and reason in found.reason, found


@pytest.fixture(scope="module")
def chunker(embedder):
    return lambda size: Chunker(embedder, ChunkingConfig(chunk_size=size, chunk_overlap=8))


@pytest.mark.parametrize("size", [48, 96, 200])
def test_no_table_chunk_lacks_its_header_row(extracted, chunker, size):
    split = chunker(size)
    for name, found in extracted.items():
        chunks = [s if isinstance(s, str) else found.text[s[0]:s[1]] for s in split.split(found.text, found.metadata)]
        seen = set()
        for chunk in chunks:
            rows = [line for line in chunk.split("\n") if line.startswith("| ") and line != HEADER
                    and not line.startswith("| ---")]
            data = [r for r in rows if r in {row_line(i) for i in range(1, 31)}]
            if data:
                assert HEADER in chunk.split("\n"), (name, size, chunk)
                seen.update(data)
        expected = {row_line(i) for i in range(1, 31)} & set(found.text.split("\n"))
        assert seen == expected, (name, size, expected - seen)  # every row is in some chunk


def test_a_table_that_fits_is_one_chunk_and_pieces_repeat_heading_and_caption(extracted, chunker):
    slides = extracted["prices.pptx"].text  # 7 rows: fits the model's 256 tokens
    (start, end), = table_blocks(slides)
    assert any(s <= start and end <= e for s, e in chunker(256).split(slides, None))  # whole, in its slide's chunk
    text = extracted["prices.docx"].text  # 30 rows: does not
    pieces = [s for s in chunker(96).split(text, None) if isinstance(s, str)]
    assert len(pieces) >= 3
    for piece in pieces:
        assert piece.startswith(f"### The table\n{corpus.CAPTION}\n\n{HEADER}\n| --- |"), piece


@pytest.mark.stores("faiss")
def test_questions_about_a_cell_retrieve_its_row_with_the_header(make_server):
    """Each format through POST /index/files (small chunks, so the table is split), then questions whose
    answer is one cell: a top hit holds that row and the header row, with its heading path."""
    files = {n: corpus.corpus()[n] for n in ("prices.docx", "prices.xlsx", "prices.pptx", "prices.pdf")}
    with make_server() as (base, _):
        r = httpx.post(f"{base}/index/files", timeout=300,
                       data={"index_name": "prices", "chunking": json.dumps({"chunk_size": 96}),
                             "metadata": json.dumps({"team": "sales"})},
                       files=[("files", (n, d, "application/octet-stream")) for n, d in files.items()])
        assert r.status_code == 200, r.text
        ids = sorted(d["doc_id"] for d in r.json())
        assert ids == ["prices.docx", "prices.pdf", "prices.pptx#slide=1", "prices.pptx#slide=2",
                       "prices.xlsx#sheet=Notes", "prices.xlsx#sheet=Prices"]
        for question, row in corpus.QUESTIONS:
            hits = httpx.post(f"{base}/retrieve", json={"index_name": "prices", "query": question,
                                                        "max_node_count": 3}).json()["results"]
            holding = [h for h in hits if row_line(row) in h["text"].split("\n")]
            assert holding, (question, [h["text"][:200] for h in hits])
            for hit in holding:
                assert HEADER in hit["text"].split("\n")
                assert hit["metadata"]["team"] == "sales"
                if hit["doc_id"] == "prices.docx":
                    assert hit["metadata"]["heading_path"] == [corpus.DOC_TITLE, corpus.SECTION, "The table"]
                if hit["doc_id"] == "prices.xlsx#sheet=Prices":
                    assert hit["metadata"]["sheet"] == "Prices" and hit["metadata"]["heading_path"] == ["Sheet: Prices"]
        docs = httpx.get(f"{base}/indexes/prices/documents", params={"limit": 10}).json()["documents"]
        meta = {d["doc_id"]: d["metadata"] for d in docs}
        assert meta["prices.pptx#slide=2"]["slide"] == 2 and meta["prices.pdf"]["page"] == 1


@pytest.mark.stores("faiss")
def test_index_files_refuses_bad_files_with_a_reason(make_server):
    with make_server() as (base, _):
        for name, status, reason in (("bomb.docx", 422, "zip bomb"), ("locked.pdf", 422, "encrypted"),
                                     ("truncated.docx", 422, "truncated or corrupt")):
            r = httpx.post(f"{base}/index/files", data={"index_name": "bad"}, timeout=120,
                           files=[("files", (name, corpus.broken()[name], "application/octet-stream"))])
            assert r.status_code == status and reason in r.json()["detail"], r.text
        r = httpx.post(f"{base}/index/files", data={"index_name": "bad"},
                       files=[("files", ("tool.exe", b"MZ\x90\x00", "application/octet-stream"))])
        assert r.status_code == 415, r.text
        r = httpx.post(f"{base}/index/files", data={"index_name": "bad", "ocr_languages": "eng;rm"},
                       files=[("files", ("a.png", corpus.png_bytes(), "image/png"))])
        assert r.status_code == 400, r.text
        assert httpx.get(f"{base}/indexes").json() == []  # nothing indexed


@pytest.mark.stores("faiss")
def test_uploads_take_the_office_formats_with_sections(make_server):
    with make_server() as (base, _):
        r = httpx.post(f"{base}/v1/files", timeout=120,
                       files={"file": ("prices.pptx", corpus.pptx_bytes(), "application/octet-stream")})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 120
        while (info := httpx.get(f"{base}/v1/files/{r.json()['id']}").json())["ingestion_status"] != "completed":
            assert info["ingestion_status"] != "failed" and time.monotonic() < deadline, info
        assert info["documents"] == 2, info
        docs = httpx.get(f"{base}/indexes/conversations/documents", params={"limit": 10}).json()["documents"]
        assert sorted(d["metadata"]["slide"] for d in docs) == [1, 2]
        r = httpx.post(f"{base}/v1/files", files={"file": ("bomb.docx", corpus.broken()["bomb.docx"], "application/zip")})
        assert r.status_code == 422 and "zip bomb" in r.json()["error"]["message"], r.text
