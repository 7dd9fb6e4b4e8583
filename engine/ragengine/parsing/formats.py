"""The readers the child runs, one per kind; each returns ``Parsed`` or ``Refused`` and stops as
soon as a budget in ``ParseLimits`` (pages, characters) is exceeded."""

from __future__ import annotations

import io
from collections.abc import Callable

from ragengine.parsing.limits import Parsed, ParseLimits, Refused


class TextBuilder:
    """The document's text, block by block, refusing once it passes ``max_chars``; records where each
    section (page, slide, sheet) starts."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.blocks: list[str] = []
        self.length = 0
        self.sections: list[tuple[int, dict]] = []

    def section(self, metadata: dict) -> None:
        self.sections.append((self.length + (2 if self.blocks else 0), metadata))

    def add(self, block: str) -> bool:
        """False once the text is over the limit (the caller stops and refuses)."""
        block = block.strip()
        if not block:
            return True
        self.length += len(block) + (2 if self.blocks else 0)
        self.blocks.append(block)
        return self.length <= self.max_chars

    def too_long(self) -> Refused:
        return Refused(f"too large: more than {self.max_chars} characters of text (the limit)", over_limit=True)

    def parsed(self, metadata: dict) -> Parsed:
        text = "\n\n".join(self.blocks)
        # a section with no text of its own starts where the next one does: drop it
        sections = [(o, m) for i, (o, m) in enumerate(self.sections)
                    if o < len(text) and (i + 1 == len(self.sections) or self.sections[i + 1][0] > o)]
        return Parsed(text, metadata, sections)


def too_many(what: str, count: int, limit: int) -> Refused:
    return Refused(f"too large: {count} {what} (the limit is {limit})", over_limit=True)


def pdf(data: bytes, limits: ParseLimits) -> Parsed | Refused:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        try:
            if not reader.decrypt(""):
                return Refused("the PDF is encrypted with a password")
        except Exception as exc:
            return Refused(f"the PDF is encrypted and cannot be opened ({exc})")
    count = len(reader.pages)
    if count > limits.max_pages:
        return too_many("pages", count, limits.max_pages)
    out = TextBuilder(limits.max_chars)
    for number, page in enumerate(reader.pages, 1):
        out.section({"page": number})
        if not out.add(page.extract_text() or ""):
            return out.too_long()
    return out.parsed({"format": "pdf", "pages": count})


READERS: dict[str, Callable[[bytes, ParseLimits], Parsed | Refused]] = {"pdf": pdf}


def parse(kind: str, data: bytes, limits: ParseLimits) -> Parsed | Refused:
    reader = READERS.get(kind)
    if reader is None:
        return Refused(f"no reader for {kind!r}")
    return reader(data, limits)
