"""Uploaded files: type checks, text extraction (plain text, Markdown, PDF, DOCX, PPTX, XLSX, CSV,
images through OCR) and parts.

The background ingestion lives in ``ingestion.py``. The type is decided from the file's bytes first
(a PDF starts with ``%PDF-``), then its name and declared content type, so a PDF sent as
``application/octet-stream`` works and a binary sent as ``text/plain`` is refused (415). Every
format but plain text and Markdown is read by the bounded parser (``ragengine.parsing``: a child
process with CPU-time, memory, page and character budgets); a file over a budget raises
``Unprocessable`` (422) with the reason. The job
queue holds the parts (``encode_job``), so a file is parsed once, when it is accepted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from ragengine import formats
from ragengine.errors import Unprocessable, UnsupportedMediaType
from ragengine.parsing.formats import decode_text  # one decoder for uploads and the bounded parser
from ragengine.parsing.limits import Parsed, ParseLimits

log = logging.getLogger(__name__)

_OOXML = "application/vnd.openxmlformats-officedocument."
CANONICAL = {"text": "text/plain", "markdown": "text/markdown", "pdf": "application/pdf",
             "docx": _OOXML + "wordprocessingml.document", "pptx": _OOXML + "presentationml.presentation",
             "xlsx": _OOXML + "spreadsheetml.sheet", "csv": "text/csv", "image": "image/png"}
TEXT_TYPES = {"text/plain": "text", "text/markdown": "markdown", "text/x-markdown": "markdown"}
DECLARED = {**{v: k for k, v in CANONICAL.items() if k not in ("text", "markdown")},
            "image/jpeg": "image", "image/tiff": "image", "application/csv": "csv"}
EXTENSIONS = {".txt": "text", ".text": "text", ".log": "text", ".md": "markdown", ".markdown": "markdown",
              ".pdf": "pdf", ".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx", ".xlsm": "xlsx", ".csv": "csv",
              ".png": "image", ".jpg": "image", ".jpeg": "image", ".tif": "image", ".tiff": "image"}
BOUNDED = frozenset({"pdf", "docx", "pptx", "xlsx", "csv", "image"})  # read by ragengine.parsing
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")
PART_CHARS = 8000  # text is ingested in parts of about this size, so progress moves on long files


class ParseError(Exception):
    """The file has a supported type but its content cannot be read (broken or encrypted PDF, no text)."""


@dataclass
class Part:
    text: str
    metadata: dict = field(default_factory=dict)


def detect_kind(data: bytes, filename: str, content_type: str | None) -> str:
    """One of ``CANONICAL``'s kinds; raises UnsupportedMediaType for anything else."""
    name = (filename or "").lower()
    ext = name[name.rfind("."):] if "." in name else ""
    declared = (content_type or "").split(";")[0].strip().lower()
    if data[:1024].lstrip().startswith(b"%PDF-") or ext == ".pdf" or declared == "application/pdf":
        return "pdf"
    if data.startswith(_IMAGE_MAGIC):
        return "image"
    kind = EXTENSIONS.get(ext) or DECLARED.get(declared) or TEXT_TYPES.get(declared)
    if kind is None:
        raise UnsupportedMediaType(
            f"Unsupported file type {declared or 'unknown'!r} ({filename!r}); upload plain text, Markdown, PDF, "
            "DOCX, PPTX, XLSX, CSV or an image (PNG, JPEG, TIFF)."
        )
    if kind in BOUNDED:
        return kind
    if b"\x00" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnsupportedMediaType(f"{filename!r} is declared as text but contains binary data.")
    return kind


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


def bounded_parts(data: bytes, kind: str, limits: ParseLimits) -> tuple[str, list[Part]]:
    """The bounded parser's text (each page, slide or sheet opened by its label line, ``[page 3]``, which
    the chunker and the citations read: ``parsing/units.py``) and one part per section (or the whole
    text); raises ParseError (unreadable) or Unprocessable (over a budget)."""
    from ragengine.parsing import sandbox

    what = "image" if kind == "image" else kind.upper()
    found = sandbox.parse(kind, data, limits)
    if not isinstance(found, Parsed):
        if found.over_limit:
            raise Unprocessable(f"The {what} was not parsed: {found.reason}.")
        raise ParseError(found.reason if found.reason.startswith("the ") else f"the {what} {found.reason}")
    if kind == "pdf" and not found.metadata.get("page_count"):
        raise ParseError("the PDF has no pages")
    shared = {k: v for k, v in found.metadata.items() if k in ("title", "format")}
    parts = [Part(text, {**shared, **meta}) for text, meta in found.parts()]
    if not parts:
        raise ParseError(f"the {what} has no extractable text" + (
            " (no text layer, and no scanned image to OCR)" if kind == "pdf" else ""))
    return found.text, parts


def extract(data: bytes, kind: str, limits: ParseLimits | None = None) -> tuple[str, list[Part]]:
    """The full text (for inline use) and the parts to ingest, each with its metadata. Blocking (the
    bounded formats wait for their child process): run it in an executor."""
    limits = limits or ParseLimits()
    if kind in BOUNDED:
        return bounded_parts(data, kind, limits)
    text = decode_text(data)
    if not text.strip():
        raise ParseError("the file is empty")
    if len(text) > limits.max_chars:
        raise Unprocessable(f"The file has {len(text)} characters of text; the limit is {limits.max_chars}.")
    return text, [Part(p, {"part": i}) for i, p in enumerate(split_parts(text))]


# -- the job's payload: the parse result, stored in the queue instead of the uploaded bytes -----------
JOB_PREFIX = formats.PARSED.name.encode() + b"/"
JOB_MAGIC = JOB_PREFIX + b"%d\n" % formats.PARSED.current


def encode_job(parts: list[Part] | None, error: str | None = None) -> bytes:
    body = {"error": error} if error is not None else {"parts": [[p.text, p.metadata] for p in parts or []]}
    return JOB_MAGIC + json.dumps(body, ensure_ascii=False).encode()


def decode_job(payload: bytes) -> list[Part] | None:
    """The parts of a queued job; raises ParseError with the reason recorded at upload. None: the
    payload is an upload's raw bytes (queued by an engine from before parse-once), to parse now."""
    if not payload.startswith(JOB_MAGIC):
        head, newline, _ = payload[:32].partition(b"\n")
        version = head[len(JOB_PREFIX):]
        if head.startswith(JOB_PREFIX) and newline and version.isdigit():  # queued by a newer engine: refused, named
            try:
                formats.PARSED.check(int(version), "the queued upload")
            except formats.FormatRefused as exc:
                raise ParseError(str(exc)) from exc
        return None
    body = json.loads(payload[len(JOB_MAGIC):])
    if "error" in body:
        raise ParseError(str(body["error"]))
    return [Part(str(text), dict(meta)) for text, meta in body["parts"]]
