"""Uploaded files: type checks, text extraction (plain text, Markdown, PDF via pypdf) and parts.

Pure functions only; the background ingestion lives in ``ingestion.py``. The type is decided from
the file's bytes first (a PDF starts with ``%PDF-``), then its name and declared content type, so a
PDF sent as ``application/octet-stream`` works and a binary sent as ``text/plain`` is refused (415).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field

from ragengine.errors import UnsupportedMediaType

log = logging.getLogger(__name__)

TEXT_TYPES = {"text/plain": "text", "text/markdown": "markdown", "text/x-markdown": "markdown"}
EXTENSIONS = {".txt": "text", ".text": "text", ".log": "text", ".md": "markdown", ".markdown": "markdown",
              ".pdf": "pdf"}
CANONICAL = {"text": "text/plain", "markdown": "text/markdown", "pdf": "application/pdf"}
PART_CHARS = 8000  # text is ingested in parts of about this size, so progress moves on long files


class ParseError(Exception):
    """The file has a supported type but its content cannot be read (broken or encrypted PDF, no text)."""


@dataclass
class Part:
    text: str
    metadata: dict = field(default_factory=dict)


def detect_kind(data: bytes, filename: str, content_type: str | None) -> str:
    """'text' | 'markdown' | 'pdf'; raises UnsupportedMediaType for anything else."""
    name = (filename or "").lower()
    ext = name[name.rfind("."):] if "." in name else ""
    declared = (content_type or "").split(";")[0].strip().lower()
    if data[:1024].lstrip().startswith(b"%PDF-") or ext == ".pdf" or declared == "application/pdf":
        return "pdf"
    kind = EXTENSIONS.get(ext) or TEXT_TYPES.get(declared)
    if kind is None:
        raise UnsupportedMediaType(
            f"Unsupported file type {declared or 'unknown'!r} ({filename!r}); upload plain text, Markdown or PDF."
        )
    if b"\x00" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnsupportedMediaType(f"{filename!r} is declared as text but contains binary data.")
    return kind


def decode_text(data: bytes) -> str:
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")  # the usual non-UTF-8 text from office tools


def split_parts(text: str, *, size: int = PART_CHARS) -> list[str]:
    """Paragraph-aligned parts of about ``size`` characters (the index's chunker splits further)."""
    text = text.strip()
    if len(text) <= size:
        return [text] if text else []
    parts: list[str] = []
    current: list[str] = []
    length = 0
    for para in text.split("\n\n"):
        if length + len(para) > size and current:
            parts.append("\n\n".join(current))
            current, length = [], 0
        while len(para) > size:  # one giant paragraph: hard split
            parts.append(para[:size])
            para = para[size:]
        current.append(para)
        length += len(para) + 2
    if current and "\n\n".join(current).strip():
        parts.append("\n\n".join(current))
    return [p for p in parts if p.strip()]


def pdf_pages(data: bytes) -> list[str]:
    """Text per page; raises ParseError with a reason a user can act on."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):
                    raise ParseError("the PDF is encrypted with a password")
            except ParseError:
                raise
            except Exception as exc:
                raise ParseError(f"the PDF is encrypted and cannot be opened ({exc})") from exc
        pages = [(page.extract_text() or "") for page in reader.pages]
    except ParseError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, IndexError, AttributeError, OSError, RecursionError) as exc:
        raise ParseError(f"the PDF could not be read: {exc.__class__.__name__}: {exc}") from exc
    except Exception as exc:  # pypdf raises a wide variety on hostile input; never crash the worker
        raise ParseError(f"the PDF could not be read: {exc.__class__.__name__}: {exc}") from exc
    if not pages:
        raise ParseError("the PDF has no pages")
    if not any(p.strip() for p in pages):
        raise ParseError("the PDF has no extractable text (scanned images need OCR, which is not supported)")
    return pages


def extract(data: bytes, kind: str) -> tuple[str, list[Part]]:
    """The full text (for inline use) and the parts to ingest, each with its metadata."""
    if kind == "pdf":
        pages = pdf_pages(data)
        parts = [Part(text, {"page": i + 1}) for i, text in enumerate(pages) if text.strip()]
        full = "\n\n".join(f"[page {p.metadata['page']}]\n{p.text.strip()}" for p in parts)
        return full, parts
    text = decode_text(data)
    if not text.strip():
        raise ParseError("the file is empty")
    return text, [Part(p, {"part": i}) for i, p in enumerate(split_parts(text))]
