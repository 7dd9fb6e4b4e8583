"""Files to documents: which files are text, how to read them, how code is marked for the code splitter.

Light (the standard library; the format libraries load in the bounded parser's child only), so the
operator's source sync and the ``ragengine index`` command share it without the engine's model stack.

``to_document(path, data)`` returns ``Extracted(text, metadata)`` or ``Skipped(reason)``: plain text,
Markdown and reStructuredText as they are, HTML with its text extracted (scripts and styles dropped),
source code marked ``split_type: code`` with its language. PDF (text, ruled tables, scanned pages
through OCR), DOCX, PPTX, XLSX, CSV and images (OCR) go through the bounded parser
(``ragengine.parsing``: a child process with CPU-time, memory, page, character, archive and OCR
budgets), parsed once, into Markdown with ``sections`` (pages, slides, sheets). Anything else
(binary, unknown, not UTF-8, empty, over a budget) is skipped with a reason a status line can show;
``Skipped.over_limit`` tells a budget from a broken file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import ClassVar

from ragengine.parsing import limits as why
from ragengine.parsing.limits import Parsed, ParseLimits

CODE_LANGUAGES = {
    ".py": "python", ".go": "go", ".js": "javascript", ".ts": "typescript", ".java": "java", ".rs": "rust",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".rb": "ruby", ".sh": "bash",
    ".cs": "c_sharp", ".kt": "kotlin", ".php": "php", ".scala": "scala", ".swift": "swift",
}
TEXT_SUFFIXES = {".txt", ".text", ".md", ".markdown", ".rst", ".adoc", ".json", ".yaml", ".yml", ".toml",
                 ".ini", ".cfg", ".conf", ".log", ""}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
FORMATS = {".md": "markdown", ".markdown": "markdown", ".rst": "restructuredtext", ".pdf": "pdf"}
# Formats read by the bounded parser (their cost is not linear in their size, or they are archives):
# suffix -> its kind. Their text is Markdown (headings, lists, pipe tables whose first row is the header).
BOUNDED = {".pdf": "pdf", ".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx", ".xlsm": "xlsx", ".csv": "csv",
           ".png": "image", ".jpg": "image", ".jpeg": "image", ".tif": "image", ".tiff": "image"}


# What a file is, by name, for a source's ``ingestion.formats`` (docs/sources.md): one of FORMAT_NAMES.
FORMAT_NAMES = ("text", "markdown", "restructuredtext", "html", "code", "pdf", "docx", "pptx", "xlsx", "csv", "image")


def format_of(path: str) -> str | None:
    """The format a file of this name is read as (``FORMAT_NAMES``), or None when no reader takes it."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in BOUNDED:
        return BOUNDED[suffix]
    if suffix in HTML_SUFFIXES:
        return "html"
    if suffix in CODE_LANGUAGES:
        return "code"
    if suffix in TEXT_SUFFIXES:
        return FORMATS.get(suffix, "text")
    return None


@dataclass(frozen=True)
class Extracted:
    text: str
    metadata: dict = field(default_factory=dict)
    # (offset into text, metadata) where each page / slide / sheet starts; empty for plain formats
    sections: list[tuple[int, dict]] = field(default_factory=list)


@dataclass(frozen=True)
class Skipped:
    reason: str
    over_limit: bool = False  # a budget (CPU time, memory, pages, characters), not a broken file
    code: str = why.UNREADABLE  # which kind of reason (``parsing.limits``: encrypted, zip_bomb, memory, ...)


def to_document(path: str, data: bytes, *, code_aware: bool = True, max_chars: int | None = None,
                limits: ParseLimits | None = None) -> Extracted | Skipped:
    """``limits``: the bounded parser's budgets (defaults: ``ParseLimits()``, with ``max_chars``)."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in BOUNDED:
        result = bounded(BOUNDED[suffix], data, limits, max_chars)
    elif suffix in HTML_SUFFIXES:
        text = _decode(data)
        result = Skipped("not UTF-8 text", code=why.NOT_TEXT) if text is None else Extracted(
            html_text(text), {"format": "html"})
    elif suffix in CODE_LANGUAGES or suffix in TEXT_SUFFIXES:
        text = _decode(data)
        if text is None:
            return Skipped("binary or not UTF-8 text", code=why.NOT_TEXT)
        meta = {"format": FORMATS.get(suffix, "text")}
        if code_aware and suffix in CODE_LANGUAGES:
            meta = {"format": "code", "split_type": "code", "language": CODE_LANGUAGES[suffix]}
        result = Extracted(text, meta)
    else:
        return Skipped(f"unsupported file type '{suffix}'", code=why.UNSUPPORTED)
    if isinstance(result, Extracted):
        if not result.text.strip():
            return Skipped("no text", code=why.EMPTY)
        if max_chars is not None and len(result.text) > max_chars:
            return Skipped(f"too large: {len(result.text)} characters (the limit is {max_chars})", over_limit=True,
                           code=why.OVER_BUDGET)
    return result


def bounded(kind: str, data: bytes, limits: ParseLimits | None = None, max_chars: int | None = None) -> Extracted | Skipped:
    """``data`` read by the bounded parser (a child process; see ``ragengine.parsing``)."""
    from ragengine.parsing import sandbox

    limits = limits or ParseLimits()
    if max_chars is not None and max_chars < limits.max_chars:
        limits = ParseLimits(**{**limits.to_dict(), "max_chars": max_chars})
    found = sandbox.parse(kind, data, limits)
    if isinstance(found, Parsed):
        return Extracted(found.text, found.metadata, found.sections)
    return Skipped(f"{kind.upper() if kind != 'image' else 'image'}: {found.reason}", over_limit=found.over_limit,
                   code=found.code)


def _decode(data: bytes) -> str | None:
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


class _TextOf(HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "head"})
    BLOCK = frozenset({"p", "div", "br", "li", "tr", "section", "article", "pre", "table"})
    HEADINGS: ClassVar[dict[str, int]] = {f"h{n}": n for n in range(1, 7)}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag in self.HEADINGS and not self._skip:  # a Markdown heading, on a line of its own
            self.parts.append("\n\n" + "#" * self.HEADINGS[tag] + " ")
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        elif tag in self.HEADINGS and not self._skip:
            self.parts.append("\n\n")
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The visible text of an HTML page: headings become Markdown headings (``## Title``, so chunks know
    their section), other block elements line breaks, runs of blank lines one."""
    parser = _TextOf()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).splitlines()]
    out: list[str] = []
    for line in lines:
        if line.strip("#") == "" and line:  # a heading with no text
            line = ""
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()
