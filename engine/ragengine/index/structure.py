"""A document's structure, and the stretches of it the chunker splits on their own. Pure.

A document's text is cut into **parts** at every boundary it has: a section heading (Markdown ATX or
setext, reStructuredText; what the parser makes of DOCX, PPTX, XLSX, HTML and PDF headings) and a
page, slide or sheet label (``[page 3]``, ``parsing/units.py``). Each part knows the headings in force
(its own last), the page, slide or sheet it is on, and whether it holds text besides its heading.

The chunker then splits each part on its own, so no chunk straddles a boundary, except where parts are
merged (``stretches``): a heading with no text of its own goes with the part after it, and a **small**
part (under half the chunk size) joins its neighbour when the two fit one chunk, sit on the same slide
or sheet, share a parent section (siblings, or a section's opening text and its first subsection), and
neither holds a table (a table with its caption is a unit of its own). Such a chunk's place lists every
part it holds (``index/places.py``). Pages are no hard boundary for merging: a chunk of two short pages
covers ``pages: [3, 4]``. Why these rules, and what they cost in retrieval: docs/retrieval.md,
"Structure-first chunks".
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ragengine.index.contextual import FENCE, atx_heading, headings
from ragengine.parsing.units import units

SMALL_SHARE = 2  # a part under chunk_size / SMALL_SHARE tokens is small
HARD_UNITS = ("slide", "sheet")  # never merged across (a page boundary is)
_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}[ \t]*$")


@dataclass(frozen=True)
class Part:
    start: int  # its first character: its label line, its heading line, or the text after a boundary
    body_start: int  # after its label line: no chunk starts with a label
    end: int
    path: tuple[str, ...]  # the titles of the headings in force, outermost first, its own last
    units: tuple[tuple[str, Any], ...]  # the page, slide or sheet it is on: (("page", 3),)
    has_body: bool  # text besides its label and heading lines

    def unit(self, key: str) -> Any:
        return next((v for k, v in self.units if k == key), None)

    @property
    def hard_unit(self) -> tuple[Any, ...]:
        return tuple(self.unit(k) for k in HARD_UNITS)


def _paths(heads: Sequence[tuple[int, int, str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    path: list[tuple[int, str]] = []
    for _, level, title in heads:
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        out.append(tuple(t for _, t in path))
    return out


def has_content(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` holds a line that is not blank, a heading (ATX, or a setext /
    reStructuredText title with its adornment lines), a label or a code fence."""
    lines = text[start:end].split("\n")
    for i, line in enumerate(lines):
        bare = line.strip()
        if not bare or _ADORNMENT.match(bare) or FENCE.match(line) or atx_heading(line.rstrip("\r")):
            continue
        if units(bare):
            continue
        if i + 1 < len(lines) and _ADORNMENT.match(lines[i + 1].strip()):
            continue  # a title over its underline
        return True
    return False


def compute_parts(text: str) -> tuple[Part, ...]:
    """The document's parts in order."""
    heads = headings(text)
    labels = units(text)
    head_at = [h[0] for h in heads]
    paths = _paths(heads)
    label_at = {start: (end, key, value) for start, end, key, value in labels}
    bounds = sorted({0, len(text), *head_at, *label_at})
    out: list[Part] = []
    current: dict[str, Any] = {}
    for a, b in itertools.pairwise(bounds):
        body_start = a
        if a in label_at:
            end, key, value = label_at[a]
            current = {**current, key: value}
            body_start = min(end, b)
        n = bisect.bisect_right(head_at, a)
        path = paths[n - 1] if n else ()
        out.append(Part(a, body_start, b, path, tuple(current.items()), has_content(text, body_start, b)))
    return tuple(out)


def related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Siblings (one parent), or one path inside the other (a section's opening text and its subsection)."""
    return a[:-1] == b[:-1] or a == b[:len(a)] or b == a[:len(b)]


def is_row(line: str) -> bool:
    line = line.strip()
    return len(line) >= 2 and line[0] == "|" and line[-1] == "|"


def _is_separator(line: str) -> bool:
    """A pipe table's second line: cells of '-' (at least three) with optional ':' for alignment."""
    if not is_row(line):
        return False
    cells = line.strip()[1:-1].split("|")
    return all(c.strip().strip(":").count("-") >= 3 and not c.strip().strip(":").strip("-") for c in cells)


def table_blocks(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every Markdown pipe table in ``text`` (a header row, a separator row, then
    rows), in order, outside fenced code. One pass over the lines, string methods only."""
    if "|" not in text:
        return []
    out: list[tuple[int, int]] = []
    lines = text.splitlines(keepends=True)
    offset, i, fenced = 0, 0, False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and is_row(line) and i + 1 < len(lines) and _is_separator(lines[i + 1]):
            start, j = offset, i + 2
            end = offset + len(line) + len(lines[i + 1])
            last = lines[i + 1]
            while j < len(lines) and is_row(lines[j]):
                end += len(lines[j])
                last = lines[j]
                j += 1
            out.append((start, end - (len(last) - len(last.rstrip("\r\n")))))
            offset = end
            i = j
            continue
        offset += len(line)
        i += 1
    return out


@dataclass
class Stretch:
    start: int
    end: int
    tokens: int
    last: Part
    tabular: bool  # holds a table: never merged with a neighbour

def stretches(text: str, count: Callable[[str], int], chunk_size: int) -> list[tuple[int, int, int]]:
    """``(start, end, tokens)`` of each stretch the chunker splits on its own: one part, or small
    neighbours merged (the module's rules). A stretch of at most ``chunk_size`` tokens is one chunk."""
    small = chunk_size // SMALL_SHARE
    out: list[Stretch] = []
    waiting: Part | None = None  # heading lines waiting for the text they head

    def tokens_of(start: int, end: int) -> int:
        if end - start > chunk_size * 12:  # far more characters than one chunk holds: not counted
            return chunk_size + 1
        return count(text[start:end])

    for part in compute_parts(text):
        if not part.has_body:
            if waiting is not None and waiting.hard_unit != part.hard_unit:
                _keep(out, waiting, tokens_of)
                waiting = None
            if waiting is None and text[part.body_start:part.end].strip():
                waiting = part
            continue
        start = part.body_start
        if waiting is not None:
            if waiting.hard_unit == part.hard_unit:
                start = waiting.body_start
            else:
                _keep(out, waiting, tokens_of)
            waiting = None
        here = Stretch(start, part.end, tokens_of(start, part.end), part, bool(table_blocks(text[start:part.end])))
        prev = out[-1] if out else None
        if (prev is not None and prev.last.has_body and prev.last.hard_unit == part.hard_unit
                and not prev.tabular and not here.tabular and (prev.tokens < small or here.tokens < small)
                and prev.tokens + here.tokens <= chunk_size and related(prev.last.path, part.path)):
            prev.end, prev.tokens, prev.last = part.end, tokens_of(prev.start, part.end), part
        else:
            out.append(here)
    if waiting is not None:
        _keep(out, waiting, tokens_of)
    return [(s.start, s.end, s.tokens) for s in out]


def _keep(out: list[Stretch], part: Part, tokens_of: Callable[[int, int], int]) -> None:
    """Heading lines that head nothing (the last lines of a slide, say): with the stretch before them
    on the same slide or sheet, else on their own, so no text goes unindexed."""
    prev = out[-1] if out else None
    if prev is not None and prev.end == part.start and prev.last.hard_unit == part.hard_unit:
        prev.end, prev.tokens = part.end, tokens_of(prev.start, part.end)
    else:
        out.append(Stretch(part.body_start, part.end, tokens_of(part.body_start, part.end), part, False))
