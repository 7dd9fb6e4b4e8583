"""What every reader builds with: the two ways a read ends early (``OverBudget``, ``Unreadable``), the
text with its sections under the character budget (``TextBuilder``), and Markdown pipe tables."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from ragengine.parsing import limits as why
from ragengine.parsing.limits import Parsed
from ragengine.parsing.units import label


class OverBudget(Exception):
    """A budget was exceeded deep inside a reader; becomes ``Refused(over_limit=True)``."""

    def __init__(self, message: str, code: str = why.OVER_BUDGET) -> None:
        super().__init__(message)
        self.code = code


class Unreadable(Exception):
    """The file cannot be read (its reason is the message); becomes ``Refused``."""

    def __init__(self, message: str, code: str = why.UNREADABLE) -> None:
        super().__init__(message)
        self.code = code


class TextBuilder:
    """The document's text, block by block, refusing once it passes ``max_chars``; records where each
    section (page, slide, sheet) starts, and writes its label line there (``parsing/units.py``), so
    the text itself says where each part of it is. A section with no text of its own is dropped,
    label and all."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.blocks: list[str] = []
        self.length = 0
        self.sections: list[tuple[int, dict]] = []
        self._label_at: int | None = None  # the block index of the open section's label

    def section(self, metadata: dict) -> None:
        self._drop_empty_section()
        self.sections.append((self.length + (2 if self.blocks else 0), metadata))
        line = label(metadata)
        if line is not None:
            self.add(line)
            self._label_at = len(self.blocks) - 1

    def _drop_empty_section(self) -> None:
        if self._label_at is not None and self._label_at == len(self.blocks) - 1:
            dropped = self.blocks.pop()
            self.length -= len(dropped) + (2 if self.blocks else 0)
            self.sections.pop()
        self._label_at = None

    def add(self, block: str) -> None:
        """Raises OverBudget once the text is over the limit (the reader stops there)."""
        block = block.strip()
        if not block:
            return
        self.length += len(block) + (2 if self.blocks else 0)
        self.blocks.append(block)
        if self.length > self.max_chars:
            raise OverBudget(f"too large: more than {self.max_chars} characters of text (the limit)")

    def parsed(self, metadata: dict) -> Parsed:
        self._drop_empty_section()
        text = "\n\n".join(self.blocks)
        # a section with no text (and no label) of its own starts where the next one does: drop it
        sections = [(o, m) for i, (o, m) in enumerate(self.sections)
                    if o < len(text) and (i + 1 == len(self.sections) or self.sections[i + 1][0] > o)]
        return Parsed(text, metadata, sections)


def too_many(what: str, count: int, limit: int) -> OverBudget:
    return OverBudget(f"too large: {count} {what} (the limit is {limit})")


# -- Markdown ----------------------------------------------------------------------------------------
def cell_text(value: Any) -> str:
    """A table cell on one line, pipes escaped; numbers without a spurious '.0', dates in ISO form."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        value = value.isoformat()
    return " ".join(str(value).split()).replace("|", "\\|")


def markdown_table(rows: Iterable[Sequence[Any]]) -> str:
    """A pipe table, the first row its header; empty rows and trailing empty columns dropped."""
    clean = [[cell_text(v) for v in row] for row in rows]
    clean = [r for r in clean if any(r)]
    if not clean:
        return ""
    width = max((max((i + 1 for i, v in enumerate(r) if v), default=0) for r in clean), default=0)
    if width == 0:
        return ""
    clean = [(r + [""] * width)[:width] for r in clean]
    lines = ["| " + " | ".join(clean[0]) + " |", "|" + " --- |" * width]
    lines += ["| " + " | ".join(r) + " |" for r in clean[1:]]
    return "\n".join(lines)
