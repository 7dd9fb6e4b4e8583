"""Where a page, slide or sheet starts in a document's text: a line of its own, ``[page 3]``,
``[slide 3]`` or ``[sheet Prices]``. Pure.

The bounded parser writes one before each page, slide and sheet (``blocks.TextBuilder.section``), so
the place travels with the text through every way a document reaches an index (``POST /index`` from
``ragengine index`` or a source sync, ``POST /index/files``, uploads, vector store files) and the
chunker and the citations read it back (``index/structure.py``, ``index/places.py``). A client that
sends its own text may write them too. Sheet names follow Excel's rules (at most 31 characters,
none of ``[ ] : * ? / \\``), so a label is never ambiguous.
"""

from __future__ import annotations

import re
from typing import Any

UNIT_KEYS = ("page", "slide", "sheet")
# One label per line, alone on it; bounded repetitions, so the scan is linear in the text.
_LABEL = re.compile(r"^\[(?:(page|slide) ([1-9][0-9]{0,5})|sheet ([^\[\]\n:*?/\\]{1,31}))\][ \t]*\r?$", re.MULTILINE)


def label(metadata: dict) -> str | None:
    """The label line for a section's metadata (``{"page": 3}`` -> ``[page 3]``), or None."""
    for key in UNIT_KEYS:
        if key in metadata:
            value = " ".join(str(metadata[key]).split())
            return f"[{key} {value}]"
    return None


def units(text: str) -> list[tuple[int, int, str, Any]]:
    """``(start, end, key, value)`` of every label line in ``text``, in order: ``end`` is past the
    line's line break; ``value`` an int for pages and slides, the name for sheets."""
    if "[" not in text:
        return []
    out: list[tuple[int, int, str, Any]] = []
    for m in _LABEL.finditer(text):
        end = m.end()
        if text.startswith("\n", end):
            end += 1
        if m.group(1):
            out.append((m.start(), end, m.group(1), int(m.group(2))))
        else:
            out.append((m.start(), end, "sheet", m.group(3).strip()))
    return out
