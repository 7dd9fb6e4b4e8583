"""The text embedded and keyword-indexed for a chunk of an index with chunking option ``contextual``:
``contextual_text(title, section path, chunk)``, the document's ``title`` metadata and the Markdown /
reStructuredText headings in force where the chunk starts, above the chunk. What clients get back and
what goes into prompts stays the chunk itself. ``index_texts`` is the one entry point every store
backend calls, at embedding time and when keyword postings are added or removed.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any

# A contextual prefix is cut to this many characters, and the chunk's token budget shrinks by
# CONTEXT_TOKENS so that prefix + chunk still fit the embedding model (~4 characters a token).
CONTEXT_MAX_CHARS = 160
CONTEXT_TOKENS = 48

FENCE = re.compile(r"^ {0,3}(```|~~~)")
_RST_ADORN = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}[ \t]*$")  # one punctuation character, 3+ times


def atx_heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` when ``line`` (no line break) is a Markdown ATX heading (``## Title ##``), else None.

    String methods only, linear in the line's length: the regex it replaces
    (``^ {0,3}(#{1,6})[ \\t]+(.+?)(?:[ \\t]+#+)?[ \\t]*$``) backtracked quadratically on a long run of
    blanks, and a 30 KB heading held the event loop for seconds (issue 22). Same results: the title
    keeps inner blanks, loses a closing ``#`` run only when a blank precedes it and text remains."""
    body = line.lstrip(" ")
    if len(line) - len(body) > 3:
        return None
    rest = body.lstrip("#")
    level = len(body) - len(rest)
    if not 1 <= level <= 6 or rest[:1] not in (" ", "\t"):
        return None
    title = rest.lstrip(" \t")
    if not title:  # only blanks after the hashes: the regex's title took one of them
        return (level, "") if len(rest) >= 2 else None
    title = title.rstrip(" \t")
    bare = title.rstrip("#")
    if bare != title and bare and bare[-1] in " \t" and bare.strip(" \t"):
        title = bare.rstrip(" \t")
    return level, title


def headings(text: str) -> list[tuple[int, int, str]]:
    """(character offset, level from 1, title) of every section heading in ``text``, in order.

    Markdown: ATX (``## Title``) and setext (``Title`` over ``===`` / ``---``) headings, outside fenced
    code. reStructuredText: a title line under (and optionally over) a line of one repeated punctuation
    character, the level given by the order in which adornment styles first appear (as docutils does).
    Plain text has none. A line-based scan rather than a full parser: only heading lines matter here,
    and docutils would add a dependency for one lookup."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out: list[tuple[int, int, str]] = []
    styles: list[tuple[str, bool]] = []  # RST adornment styles in order of appearance
    fenced = False
    markdown = any(atx_heading(line.rstrip("\r\n")) for line in lines)
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r\n")
        if FENCE.match(line):
            fenced = not fenced
            i += 1
            continue
        if fenced:
            i += 1
            continue
        atx = atx_heading(line)
        if atx:
            out.append((offsets[i], atx[0], atx[1].strip()))
            i += 1
            continue
        nxt = lines[i + 1].rstrip("\r\n") if i + 1 < len(lines) else ""
        title = line.strip()
        under = _RST_ADORN.match(nxt)
        if title and under and not _RST_ADORN.match(line) and len(nxt.rstrip()) >= min(len(title), 3):
            prev = lines[i - 1].rstrip("\r\n") if i > 0 else ""
            over = bool(_RST_ADORN.match(prev)) and prev.strip()[0] == nxt.strip()[0]
            style = (nxt.strip()[0], over)
            if style not in styles:
                styles.append(style)
            level = styles.index(style) + 1
            if markdown and style in (("=", False), ("-", False)):
                level = 1 if style[0] == "=" else 2  # Markdown setext: fixed levels beside ATX ones
            out.append((offsets[i - 1] if over else offsets[i], level, title))
            i += 2
            continue
        i += 1
    return out


def _paths(heads: Sequence[tuple[int, int, str]]) -> list[list[str]]:
    """The section path in force right after each heading (one pass, however many chunks ask)."""
    out: list[list[str]] = []
    path: list[tuple[int, str]] = []  # (level, title)
    for _, level, title in heads:
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        out.append([t for _, t in path])
    return out


def section_path(heads: Sequence[tuple[int, int, str]], offset: int) -> list[str]:
    """Titles of the sections that contain ``offset``, outermost first, from ``headings(text)``."""
    n = bisect.bisect_right([h[0] for h in heads], offset)
    return _paths(heads[:n])[-1] if n else []


def contextual_text(title: str | None, path: Sequence[str], chunk: str) -> str:
    """The text to embed / keyword-index for ``chunk``: its document title and section path on one
    line (at most CONTEXT_MAX_CHARS characters, the path's head repeated from the title dropped),
    a blank line, then the chunk. No title and no path: the chunk unchanged."""
    parts = [title.strip()] if title and title.strip() else []
    for name in path:
        if not parts or name.strip().casefold() != parts[-1].casefold():
            parts.append(name.strip())
    if not parts:
        return chunk
    prefix = " > ".join(parts)
    if len(prefix) > CONTEXT_MAX_CHARS:
        prefix = prefix[: CONTEXT_MAX_CHARS - 1].rstrip() + "…"
    return f"{prefix}\n\n{chunk}"


def document_title(metadata: dict | None) -> str | None:
    """The ``title`` metadata field when it is a non-empty string."""
    title = (metadata or {}).get("title")
    return title if isinstance(title, str) and title.strip() else None


def index_texts(text: str, metadata: dict | None, spans: Sequence[Any] | None, *, contextual: bool) -> list[str]:
    """Per chunk of one document, the text to embed and to index for keyword search.

    ``spans`` as stored (``(start, end)`` into ``text``, or a chunk's own text; ``None`` = one chunk that
    is the whole text). With ``contextual`` off, or for code, that is the chunk itself."""
    spans = [(0, len(text))] if spans is None else spans
    chunks = [s if isinstance(s, str) else text[s[0]:s[1]] for s in spans]
    if not contextual or (metadata or {}).get("split_type") == "code":
        return chunks
    title = document_title(metadata)
    heads = headings(text)
    starts, paths = [h[0] for h in heads], _paths(heads)
    out = []
    for span, chunk in zip(spans, chunks, strict=True):
        n = 0 if isinstance(span, str) else bisect.bisect_right(starts, span[0])
        out.append(contextual_text(title, paths[n - 1] if n else [], chunk))
    return out
