"""Where a chunk is: its heading path, the sections, pages, slides or sheets it covers, and the citation
text a reader sees ("handbook.pdf, p. 41"). Pure.

``chunk_place(text, metadata, span)`` reads it from the document's structure (``index/structure.py``:
headings and ``[page N]`` labels) over the chunk's own span, so a chunk's place is where its text is:

- ``heading_path``: the document's ``title`` metadata, then the titles of the deepest section that holds
  all of the chunk's text (headings that only open the chunk do not count as its text);
- ``sections``: when the chunk holds several sections (small neighbours merged), their titles in order;
- ``page`` (one) or ``pages`` (``[from, to]``), ``slide`` or ``slides`` (``[from, to]``), ``sheet`` or
  ``sheets`` (names): the pages, slides or sheets its text is on;
- code (``split_type: code``): ``lines`` (``[from, to]``, 1-based) and, as ``heading_path``, the
  definitions (class, function, ...) that hold the chunk, read with tree-sitter where it has the
  language's grammar; ``sections``: the definitions it holds when several.

``node_metadata(doc_metadata, place, doc_id)`` is what a retrieved chunk carries on every surface (chat
``source_nodes``, ``/retrieve``, Responses, sessions): its document's metadata, its place (place keys the
document's own metadata already has are kept as the document says: a vector store file's chunks, one
document each, carry the place of their text in the file), and ``citation`` from ``citation()``, the
one formatter of the text a user sees.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ragengine.index.contextual import document_title
from ragengine.index.structure import Part, compute_parts, has_content

log = logging.getLogger(__name__)

PLACE_KEYS = ("heading_path", "sections", "page", "pages", "slide", "slides", "sheet", "sheets", "lines")
NAME_KEYS = ("filename", "file_name", "path", "title", "url")  # what a citation calls the document, in order


def span_bounds(text: str, span: Any) -> tuple[int, int]:
    """``(start, end)`` of a chunk in its document: its span, or for a chunk stored as its own text (a
    piece of a split table, which repeats the table's header) where its last line is."""
    if not isinstance(span, str):
        return int(span[0]), int(span[1])
    tail = span.rstrip().rsplit("\n", 1)[-1]
    pos = text.find(tail) if tail else -1
    return (pos, pos + len(tail)) if pos >= 0 else (0, 0)


@dataclass(frozen=True)
class Structure:
    """A document's parts (index/structure.py) with their starts, for finding the parts a span holds."""

    parts: tuple[Part, ...]
    starts: list[int]

    @classmethod
    def of(cls, text: str) -> Structure:
        every = compute_parts(text)
        return cls(every, [p.start for p in every])


def chunk_place(text: str, metadata: dict | None, span: Any, structure: Structure | None = None) -> dict:
    """The place of the chunk ``span`` of a document (keys of ``PLACE_KEYS``; empty when it has none).
    ``structure``: the document's, when the caller keeps it (retrieval keeps it on the stored record, so a
    document hit again is not read again); read here otherwise."""
    return _place(text, metadata, span, structure)


def chunk_places(text: str, metadata: dict | None, spans: Sequence[Any]) -> list[dict]:
    """The place of each of a document's chunks, the structure read once."""
    structure = None if is_code(metadata) else Structure.of(text)
    return [_place(text, metadata, span, structure) for span in spans]


def is_code(metadata: dict | None) -> bool:
    """Code documents are placed by their lines and definitions, not by a structure of headings."""
    return (metadata or {}).get("split_type") == "code"


def _place(text: str, metadata: dict | None, span: Any, structure: Structure | None) -> dict:
    start, end = span_bounds(text, span)
    if is_code(metadata):
        return _code_place(text, metadata or {}, start, end)
    held = _held_parts(text, start, end, structure or Structure.of(text))
    place: dict[str, Any] = {}
    paths = list(dict.fromkeys(p.path for p in held))
    path = _with_title(document_title(metadata), _common(paths))
    if path:
        place["heading_path"] = path
    titles = [p[-1] for p in paths if p]
    if len(paths) > 1 and titles:
        place["sections"] = titles
    for key in ("page", "slide"):
        values = sorted({v for p in held if isinstance(v := p.unit(key), int)})
        if len(values) == 1:
            place[key] = values[0]
        elif values:
            place[key + "s"] = [values[0], values[-1]]
    sheets = list(dict.fromkeys(v for p in held if (v := p.unit("sheet")) is not None))
    if len(sheets) == 1:
        place["sheet"] = sheets[0]
    elif sheets:
        place["sheets"] = sheets
    return place


def _held_parts(text: str, start: int, end: int, structure: Structure) -> list[Part]:
    """The parts whose text the chunk holds (a part the chunk only takes a heading line of does not
    count); the part it starts in when it holds no text at all."""
    every = structure.parts
    if not every:
        return []
    first = max(bisect.bisect_right(structure.starts, start) - 1, 0)
    held = []
    for p in every[first:]:
        if p.start >= max(end, start + 1):
            break
        if has_content(text, max(start, p.body_start), min(end, p.end)):
            held.append(p)
    return held or [every[first]]


def _common(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    if not paths:
        return ()
    out = paths[0]
    for p in paths[1:]:
        n = 0
        while n < min(len(out), len(p)) and out[n] == p[n]:
            n += 1
        out = out[:n]
    return out


def _with_title(title: str | None, path: Sequence[str]) -> list[str]:
    """The title, then the path, a name that repeats the one before it (the title as the first heading) once."""
    out = [title.strip()] if title else []
    for name in path:
        if name.strip() and (not out or name.strip().casefold() != out[-1].casefold()):
            out.append(name.strip())
    return out


# -- code ---------------------------------------------------------------------------------------------
_DEF_ENDINGS = ("_definition", "_declaration", "_item", "_spec")
_DEF_WORDS = ("class", "function", "method", "interface", "struct", "enum", "trait", "impl", "module",
              "namespace", "object", "type", "constructor")
_DEF_TYPES = frozenset({"class", "module", "method", "singleton_method", "function"})  # Ruby


def _name_of(node: Any, depth: int = 0) -> str | None:
    for field in ("name", "declarator", "type"):
        child = node.child_by_field_name(field)
        if child is None:
            continue
        if child.type in ("identifier", "type_identifier", "field_identifier", "constant", "name",
                          "property_identifier", "simple_identifier", "scoped_identifier", "qualified_identifier"):
            return child.text.decode("utf-8", "replace")
        if depth < 4 and (inner := _name_of(child, depth + 1)):
            return inner
    return None


def _is_definition(node: Any) -> bool:
    kind = node.type
    if kind in _DEF_TYPES:
        return True
    return kind.endswith(_DEF_ENDINGS) and any(w in kind for w in _DEF_WORDS)


@lru_cache(maxsize=64)
def outline(text: str, language: str) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """``(first line, last line, names)`` (1-based) of every named definition, outermost first; empty
    without tree-sitter or the language's grammar."""
    try:
        import tree_sitter_language_pack

        tree = tree_sitter_language_pack.get_parser(language).parse(text.encode("utf-8"))  # type: ignore[arg-type]
    except Exception as exc:  # no package, no grammar, or a grammar of another ABI
        log.debug("no outline for %s: %s", language, exc)
        return ()
    out: list[tuple[int, int, tuple[str, ...]]] = []
    todo: list[tuple[Any, tuple[str, ...]]] = [(tree.root_node, ())]
    while todo:
        node, path = todo.pop()
        if node.is_named and _is_definition(node) and (name := _name_of(node)):
            path = (*path, name)
            top = node.parent if node.parent is not None and node.parent.type == "decorated_definition" else node
            out.append((top.start_point[0] + 1, node.end_point[0] + 1, path))  # its decorators are its lines
        todo.extend((child, path) for child in reversed(node.children) if child.named_child_count or child.is_named)
    out.sort(key=lambda d: (d[0], -d[1]))
    return tuple(out)


@lru_cache(maxsize=64)
def _line_starts(text: str) -> tuple[int, ...]:
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return tuple(starts)


def _code_place(text: str, metadata: dict, start: int, end: int) -> dict:
    starts = _line_starts(text)
    first = bisect.bisect_right(starts, start)
    last = max(first, bisect.bisect_right(starts, max(end - 1, start)))
    place: dict[str, Any] = {"lines": [first, last]}
    language = metadata.get("language")
    defs = outline(text, language.lower()) if isinstance(language, str) else ()
    holding = [d for d in defs if d[0] <= first and d[1] >= last]
    container = max(holding, key=lambda d: len(d[2]))[2] if holding else ()
    path = _with_title(document_title(metadata), container)
    if path:
        place["heading_path"] = path
    inside = [d[2][-1] for d in defs if len(d[2]) == len(container) + 1 and d[2][:-1] == container
              and first <= d[0] and d[1] <= last]
    if len(inside) > 1:
        place["sections"] = inside
    return place


# -- what a retrieved chunk carries ------------------------------------------------------------------------
def node_metadata(doc_metadata: dict, place: dict | None, doc_id: str) -> dict:
    """A retrieved chunk's metadata: its document's, its place where the document says nothing of it,
    and the citation text."""
    out = dict(doc_metadata)
    for key, value in (place or {}).items():
        out.setdefault(key, value)
    out["citation"] = citation(out, doc_id)
    return out


def place_fields(metadata: dict) -> dict:
    """A chunk's place keys and ``citation`` from its metadata: what a citation or hit carries beside
    the fields of its API (Responses annotations, file search results)."""
    return {k: metadata[k] for k in (*PLACE_KEYS, "citation") if k in metadata}


def _range(value: Any) -> tuple[Any, Any] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return value[0], value[1]
    return None


def where(metadata: dict) -> str | None:
    """The place as a reader reads it: "p. 41", "pp. 41–42", "slide 3", "sheet Prices", "lines 10–42",
    else the chunk's section (the last name of its heading path, when more than the title)."""
    page = metadata.get("page")
    if isinstance(page, int) and not isinstance(page, bool):
        return f"p. {page}"
    if (pages := _range(metadata.get("pages"))) is not None:
        return f"pp. {pages[0]}–{pages[1]}"
    slide = metadata.get("slide")
    if isinstance(slide, int) and not isinstance(slide, bool):
        return f"slide {slide}"
    if (slides := _range(metadata.get("slides"))) is not None:
        return f"slides {slides[0]}–{slides[1]}"
    if isinstance(metadata.get("sheet"), str):
        return f"sheet {metadata['sheet']}"
    sheets = metadata.get("sheets")
    if isinstance(sheets, list) and sheets and all(isinstance(s, str) for s in sheets):
        return "sheets " + ", ".join(sheets)
    if (lines := _range(metadata.get("lines"))) is not None:
        return f"line {lines[0]}" if lines[0] == lines[1] else f"lines {lines[0]}–{lines[1]}"
    path = metadata.get("heading_path")
    if isinstance(path, list) and path and isinstance(path[-1], str):
        title = document_title(metadata)
        if not (len(path) == 1 and title is not None and path[0] == title.strip()):
            return path[-1]
    return None


def document_name(metadata: dict, doc_id: str) -> str:
    """What a citation calls the document: its file name, path, title or URL, else its id."""
    for key in NAME_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip() if key != "filename" else os.path.basename(value.strip()) or value.strip()
    return doc_id


def citation(metadata: dict, doc_id: str) -> str:
    """The citation text a user sees: "handbook.pdf, p. 41", "launch.pptx, slide 3", "guide.md, Install"."""
    name = document_name(metadata, doc_id)
    place = where(metadata)
    return f"{name}, {place}" if place else name
