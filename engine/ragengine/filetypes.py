"""Files to documents: which files are text, how to read them, how code is marked for the code splitter.

Pure and light (the standard library, plus pypdf imported only for a PDF), so the operator's source
sync and the ``ragengine index`` command share it without pulling in the engine's model stack.

``to_document(path, data)`` returns ``Extracted(text, metadata)`` or ``Skipped(reason)``: plain text,
Markdown and reStructuredText as they are, HTML with its text extracted (scripts and styles dropped),
PDF through pypdf, source code marked ``split_type: code`` with its language. Anything else (binary,
unknown, not UTF-8, empty) is skipped with a reason a status line can show.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath

CODE_LANGUAGES = {
    ".py": "python", ".go": "go", ".js": "javascript", ".ts": "typescript", ".java": "java", ".rs": "rust",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".rb": "ruby", ".sh": "bash",
    ".cs": "c_sharp", ".kt": "kotlin", ".php": "php", ".scala": "scala", ".swift": "swift",
}
TEXT_SUFFIXES = {".txt", ".text", ".md", ".markdown", ".rst", ".adoc", ".csv", ".json", ".yaml", ".yml", ".toml",
                 ".ini", ".cfg", ".conf", ".log", ""}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
FORMATS = {".md": "markdown", ".markdown": "markdown", ".rst": "restructuredtext", ".pdf": "pdf"}


@dataclass(frozen=True)
class Extracted:
    text: str
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    reason: str


def to_document(path: str, data: bytes, *, code_aware: bool = True, max_chars: int | None = None) -> Extracted | Skipped:
    suffix = PurePosixPath(path).suffix.lower()
    if suffix == ".pdf":
        result = _pdf(data)
    elif suffix in HTML_SUFFIXES:
        text = _decode(data)
        result = Skipped("not UTF-8 text") if text is None else Extracted(html_text(text), {"format": "html"})
    elif suffix in CODE_LANGUAGES or suffix in TEXT_SUFFIXES:
        text = _decode(data)
        if text is None:
            return Skipped("binary or not UTF-8 text")
        meta = {"format": FORMATS.get(suffix, "text")}
        if code_aware and suffix in CODE_LANGUAGES:
            meta = {"format": "code", "split_type": "code", "language": CODE_LANGUAGES[suffix]}
        result = Extracted(text, meta)
    else:
        return Skipped(f"unsupported file type '{suffix}'")
    if isinstance(result, Extracted):
        if not result.text.strip():
            return Skipped("no text")
        if max_chars is not None and len(result.text) > max_chars:
            return Skipped(f"too large: {len(result.text)} characters (the limit is {max_chars})")
    return result


def _decode(data: bytes) -> str | None:
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _pdf(data: bytes) -> Extracted | Skipped:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        return Skipped(f"unreadable PDF ({exc})")
    return Extracted("\n\n".join(p.strip() for p in pages if p.strip()), {"format": "pdf", "pages": len(pages)})


class _TextOf(HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "head"})
    BLOCK = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre", "table"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The visible text of an HTML page: block elements become line breaks, runs of blank lines one."""
    parser = _TextOf()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()
