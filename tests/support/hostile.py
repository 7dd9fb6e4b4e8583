"""Hostile files for the parser tests, built here (nothing binary is committed)."""

from __future__ import annotations

import zlib


def pdf_objects(objs: list[str | bytes], root: int = 1) -> bytes:
    """A PDF from its object bodies (1-based ids in order), with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + (body if isinstance(body, bytes) else body.encode()) + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root {root} 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def shared_stream_pdf(pages: int, stream_bytes: int = 1_000_000) -> bytes:
    """``pages`` pages whose ``/Contents`` all point at one flate stream of ``stream_bytes`` of text
    operators: a few KB on the wire, and a parser that decodes the stream again for every page pays
    for all of it each time (issue 22: 16 KB took 52 s of CPU)."""
    op = b"BT /F1 9 Tf 10 10 Td (x) Tj ET\n"
    content = zlib.compress(op * (stream_bytes // len(op)), 9)
    objs: list[str | bytes] = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "",  # the page tree, once the pages are numbered
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(content)} /Filter /FlateDecode >>\nstream\n".encode() + content + b"\nendstream",
    ]
    first = len(objs) + 1
    for _ in range(pages):
        objs.append("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
                    "/Resources << /Font << /F1 3 0 R >> >> >>")
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(f'{first + i} 0 R' for i in range(pages))}] /Count {pages} >>"
    return pdf_objects(objs)
