"""Hostile files for the parser tests, built here (nothing binary is committed), and a client that pushes a
large body as fast as a server takes it (``push_body``)."""

from __future__ import annotations

import contextlib
import select
import socket
import time
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit


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



@dataclass
class Pushed:
    """What ``push_body`` saw: the answer's status, and how many body bytes the socket took before it."""

    status: int | None
    accepted: int
    head: bytes


def push_body(base_url: str, path: str, headers: dict[str, str], total: int, *, prefix: bytes = b"",
              chunk: int = 1 << 20, deadline_s: float = 120.0) -> Pushed:
    """Send a ``total``-byte chunked body to ``path`` as fast as the server takes it, and stop as soon as it
    answers (or closes). ``accepted`` counts the body bytes (with their chunk framing, a few bytes per MiB)
    the socket took: what the server read, plus at most the kernel's buffers (a few MiB on loopback)."""
    url = urlsplit(base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=deadline_s)
    lines = [f"POST {path} HTTP/1.1", f"Host: {url.hostname}:{url.port}", "Transfer-Encoding: chunked",
             *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    sock.setblocking(False)
    pending, accepted, produced, answered, ended = b"", 0, 0, b"", False
    end = time.monotonic() + deadline_s
    try:
        while time.monotonic() < end and b"\r\n\r\n" not in answered:
            if not pending and not ended:
                data = (prefix if produced == 0 else b"") + b"x" * max(0, min(chunk, total - produced))
                pending = f"{len(data):x}\r\n".encode() + data + b"\r\n" if data else b"0\r\n\r\n"
                produced += len(data)
                ended = not data
            readable, writable, _ = select.select([sock], [sock] if pending else [], [], 1.0)
            if readable:
                data = sock.recv(65536)
                if not data:
                    break
                answered += data
            elif writable:
                try:
                    sent = sock.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    break
                accepted += sent
                pending = pending[sent:]
        sock.setblocking(True)
        sock.settimeout(10)
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in answered and (data := sock.recv(65536)):
                answered += data
    finally:
        sock.close()
    status = int(answered.split(b" ", 2)[1]) if answered.startswith(b"HTTP/") else None
    return Pushed(status, accepted, answered)
