"""What a source reader returns (``Fetched``), how it fails (``FetchError``, net/http.py's: a source read
fails as its calls do), the bounds every read runs under (``FetchLimits``, and net/http.py's ``Deadline``)
and the one step every reader shares: a file's bytes to a document, or to a reason it is skipped.

A reader never holds more than one file's bytes at a time (at most ``max_file_bytes``, counted after
decoding), refuses a source whose files or total size exceed its caps before reading its files, and
stops at the fetch's deadline. Any failure of the extractor on one file (a hostile PDF, say) skips
that file with the reason; the other files still sync.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragengine.filetypes import Extracted, format_of, to_document
from ragengine.parsing.limits import ParseLimits
from ragengine_operator.net.http import Deadline, FetchError
from ragengine_operator.sources.plan import SourceFile

MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_CHARS = 5_000_000
__all__ = ["MAX_FILE_BYTES", "Deadline", "FetchError", "FetchLimits", "Fetched", "extract", "refused_format", "too_large"]


@dataclass(frozen=True)
class FetchLimits:
    """The bounds of one fetch: per file (decoded bytes), per source (files and bytes), in time; and how
    its files are read (the source's ``ingestion``: OCR languages, the formats it accepts)."""

    max_file_bytes: int = MAX_FILE_BYTES
    max_files: int = 5000
    max_bytes: int = 64 * 1024 * 1024
    deadline_s: float = 300.0
    max_redirects: int = 5
    ocr_languages: str | None = None  # Tesseract's, 'eng+deu'; None: the parser's default (eng)
    formats: frozenset[str] | None = None  # filetypes.FORMAT_NAMES this source indexes; None: every one


@dataclass
class Fetched:
    revision: str
    files: list[SourceFile] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # path -> reason
    unchanged: bool = False  # the revision is the one already synced: nothing was read
    kept: list[str] = field(default_factory=list)  # paths not read because unchanged (HTTP 304): keep them
    validators: dict[str, dict] = field(default_factory=dict)  # http: url -> {etag, last_modified}
    # Paths read as they are, never indexed (the golden set a spec.evaluation names: docs/evaluation.md).
    raw_paths: frozenset[str] = frozenset()
    raw: dict[str, bytes] = field(default_factory=dict)


def extract(path: str, data: bytes, into: Fetched, url: str | None = None, typed_as: str | None = None,
            limits: FetchLimits | None = None) -> None:
    """Add the file's document to ``into`` (or its reason to be skipped); ``typed_as``: a name whose
    suffix tells the file type when ``path`` has none (a URL served as text/html)."""
    limits = limits or FetchLimits()
    if len(data) > limits.max_file_bytes:
        into.skipped[path] = too_large(len(data), limits.max_file_bytes)
        return
    if path in into.raw_paths:
        into.raw[path] = data
        return
    refused = refused_format(format_of(typed_as or path), limits)
    if refused:
        into.skipped[path] = refused
        return
    parse = ParseLimits(ocr_languages=limits.ocr_languages) if limits.ocr_languages else None
    try:
        found = to_document(typed_as or path, data, max_chars=MAX_CHARS, limits=parse)
    except Exception as exc:  # a parser's surprise on one hostile file must not fail the source
        into.skipped[path] = f"unreadable: {type(exc).__name__}: {exc}"[:300]
        return
    if isinstance(found, Extracted):
        into.files.append(SourceFile(path, found.text, found.metadata, url))
    else:
        into.skipped[path] = found.reason


def refused_format(kind: str | None, limits: FetchLimits) -> str | None:
    """Why a file of this format is skipped (``ingestion.formats``), or None when the source accepts it."""
    if limits.formats is None or kind is None or kind in limits.formats:
        return None
    return f"format {kind!r} is not one this source accepts (ingestion.formats: {', '.join(sorted(limits.formats))})"


def too_large(size: int, limit: int) -> str:
    return f"too large: {size} bytes (the limit is {limit})"
