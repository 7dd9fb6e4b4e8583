"""Split documents into chunks the embedding model sees whole.

Prose goes through llama-index's ``SentenceSplitter`` (or ``TokenTextSplitter``), code through
``CodeSplitter`` (tree-sitter) when metadata says ``split_type: code`` with a ``language``. Token counts
always come from the embedding model's own tokenizer, and every chunk is checked against the model's
limit afterwards: a chunk that would be truncated silently (KAITO's 1024-token chunks on a 256-token
model) is cut again at token boundaries. Chunks are returned as ``(start, end)`` spans into the text
where they are exact substrings, so the engine keeps one copy of the text.

Tables (Markdown pipe tables: what ``ragengine.parsing`` makes of DOCX, PPTX, XLSX, CSV and PDF
tables, and what people write) are kept whole when they fit ``chunk_size``; a larger one is split by
rows, and every piece repeats the table's nearest heading, its caption (the line right above it) and
its header row, so no piece of a table loses what its numbers mean (``table_blocks``,
``Chunker._table``). Those pieces are not substrings of the text: they are stored as their own text.

Contextual chunks (chunking option ``contextual``): what is embedded and keyword-indexed for a chunk is
``contextual_text(title, section path, chunk)``, the document's ``title`` metadata and the Markdown /
reStructuredText headings in force where the chunk starts, above the chunk. What clients get back and
what goes into prompts stays the chunk itself. ``index_texts`` is the one entry point every store
backend calls, at embedding time and when keyword postings are added or removed.
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ragengine.errors import BadRequest
from ragengine.index.types import ChunkingConfig

log = logging.getLogger(__name__)

SPLITTERS = ("sentence", "token")
# A contextual prefix is cut to this many characters, and the chunk's token budget shrinks by
# CONTEXT_TOKENS so that prefix + chunk still fit the embedding model (~4 characters a token).
CONTEXT_MAX_CHARS = 160
CONTEXT_TOKENS = 48
_SENTENCE_END = re.compile(r"(?<=[.!?。])(?=\s)")


def split_sentences(text: str) -> list[str]:
    """Sentence boundaries by punctuation; the pieces concatenate back to ``text`` exactly.

    Used instead of llama-index's default (NLTK punkt), which needs NLTK data files at run time and
    refuses hard-linked ones (how uv installs them)."""
    return [p for p in _SENTENCE_END.split(text) if p]


@lru_cache(maxsize=1)
def tree_sitter_available() -> bool:
    try:
        import tree_sitter_language_pack  # noqa: F401
    except Exception:
        return False
    return True


def validate_config(config: ChunkingConfig, token_limit: int) -> ChunkingConfig:
    if config.splitter not in SPLITTERS:
        raise BadRequest(f"Unknown splitter {config.splitter!r}: use one of {', '.join(SPLITTERS)}.")
    if config.chunk_size < 0 or config.chunk_overlap < 0:
        raise BadRequest("chunk_size and chunk_overlap must be >= 0.")
    size = min(config.chunk_size or token_limit, token_limit)
    if size < 16:
        raise BadRequest("chunk_size must be at least 16 tokens.")
    overlap = min(config.chunk_overlap, size // 2)
    return ChunkingConfig(chunk_size=size, chunk_overlap=overlap, splitter=config.splitter,
                          code_chunk_lines=max(1, config.code_chunk_lines), contextual=bool(config.contextual))


def new_index_config(settings: Any, chunking: dict | None, token_limit: int) -> ChunkingConfig:
    """A new index's chunking: the request's ``chunking`` over the engine's defaults, validated."""
    defaults = {"chunk_size": settings.chunk_size, "chunk_overlap": settings.chunk_overlap,
                "contextual": settings.chunk_context}
    return validate_config(ChunkingConfig.from_dict({**defaults, **(chunking or {})}), token_limit)


class Chunker:
    """Chunks for one index: ``split(text, metadata) -> list[span]`` (span = (start, end) or str)."""

    def __init__(self, embedder: Any, config: ChunkingConfig) -> None:
        self.embedder = embedder
        # Contextual chunks leave room for their title / section prefix in the model's window.
        self.limit = embedder.chunk_token_limit - (CONTEXT_TOKENS if config.contextual else 0)
        self.config = validate_config(config, self.limit)
        self._splitters: tuple[Any, Any] | None = None  # (prose, token), made on the first split
        self._code: dict[str, Any] = {}

    def _prose_and_token(self) -> tuple[Any, Any]:
        """llama-index's splitters, imported on first use: restoring indexes at start-up needs no
        llama-index (its import costs seconds), only the first write does."""
        if self._splitters is None:
            from llama_index.core.node_parser import SentenceSplitter, TokenTextSplitter

            tok = self.embedder.token_ids
            size, overlap = self.config.chunk_size, self.config.chunk_overlap
            token = TokenTextSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=tok)
            prose = token if self.config.splitter == "token" else SentenceSplitter(
                chunk_size=size, chunk_overlap=overlap, tokenizer=tok, chunking_tokenizer_fn=split_sentences)
            self._splitters = (prose, token)
        return self._splitters

    def split(self, text: str, metadata: dict | None) -> list[Any]:
        metadata = metadata or {}
        if metadata.get("split_type") == "code":
            language = metadata.get("language")
            if not language or not isinstance(language, str):
                raise BadRequest(
                    "Language not specified in node metadata: documents with split_type 'code' need a "
                    "'language' (for example 'python')."
                )
            return self._bounded(text, self._split_code(text, language.lower()))
        tables = table_blocks(text)
        if not tables:
            return self._prose(text)
        heads = headings(text)
        spans: list[Any] = []
        cursor = 0
        for start, end in tables:
            spans += _shift(self._prose(text[cursor:start]), cursor)
            spans += self._table(text, start, end, heads)
            cursor = end
        return spans + _shift(self._prose(text[cursor:]), cursor)

    def _prose(self, text: str) -> list[Any]:
        if not text.strip():
            return []
        prose, token = self._prose_and_token()
        try:
            pieces = prose.split_text(text)
        except Exception as exc:
            log.warning("sentence splitting failed (%s); splitting by tokens", exc)
            pieces = token.split_text(text)
        return self._bounded(text, pieces)

    def _bounded(self, text: str, pieces: list[str]) -> list[Any]:
        bounded: list[str] = []
        for piece in pieces:
            if piece.strip():
                bounded.extend(self._enforce_limit(piece))
        return locate_spans(text, bounded)

    # -- tables ------------------------------------------------------------------------------------
    def _table(self, text: str, start: int, end: int, heads: Sequence[tuple[int, int, str]]) -> list[Any]:
        """The table at ``text[start:end]`` whole when it fits, else pieces of whole rows, each
        ``context + header + rows`` (context: the nearest heading and the caption line above)."""
        table = text[start:end]
        budget = self.config.chunk_size
        if self.embedder.count_tokens(table) <= budget:
            return [(start, end)]
        lines = table.split("\n")
        head = "\n".join(lines[:2])
        context = "\n".join(table_context(text, start, heads))
        prefix = f"{context}\n\n{head}" if context else head
        room = budget - self.embedder.count_tokens(prefix) - 1
        if room < budget // 4:  # a long context: keep the header row, drop the rest of the context
            prefix, room = head, budget - self.embedder.count_tokens(head) - 1
        pieces: list[Any] = []
        rows: list[str] = []
        used = 0
        for row in lines[2:]:
            cost = self.embedder.count_tokens(row) + 1
            if rows and used + cost > room:
                pieces.append(prefix + "\n" + "\n".join(rows))
                rows, used = [], 0
            rows.append(row)
            used += cost
        if rows:
            pieces.append(prefix + "\n" + "\n".join(rows))
        out: list[Any] = []
        for piece in pieces:  # a single row longer than the chunk: cut, as any text would be
            out.extend(self._enforce_limit(piece))
        return out

    # -- code --------------------------------------------------------------------------------------
    def _split_code(self, text: str, language: str) -> list[str]:
        splitter = self._code_splitter(language)
        if splitter is not None:
            try:
                return splitter.split_text(text)
            except Exception as exc:
                log.warning("tree-sitter split failed for %s (%s); using the line splitter", language, exc)
        return self._split_lines(text)

    def _code_splitter(self, language: str) -> Any | None:
        if language in self._code:
            return self._code[language]
        splitter = None
        if tree_sitter_available():
            from llama_index.core.node_parser import CodeSplitter

            try:
                splitter = CodeSplitter(language=language, chunk_lines=self.config.code_chunk_lines,
                                        count_mode="token", max_tokens=self.config.chunk_size,
                                        tokenizer=self.embedder.token_ids)
            except Exception as exc:
                log.info("no tree-sitter grammar for %r (%s); using the line splitter", language, exc)
        self._code[language] = splitter
        return splitter

    def _split_lines(self, text: str) -> list[str]:
        """Line-based code splitter: whole lines up to the token budget, preferring to break before a
        blank or unindented line (a new top-level block) once the chunk is half full."""
        budget = self.config.chunk_size
        chunks: list[str] = []
        current: list[str] = []
        used = 0
        for line in text.splitlines(keepends=True):
            cost = self.embedder.count_tokens(line) + 1
            boundary = not line.strip() or not line[:1].isspace()
            if current and (used + cost > budget or (boundary and used > budget // 2)):
                chunks.append("".join(current))
                current, used = [], 0
            current.append(line)
            used += cost
        if current:
            chunks.append("".join(current))
        return [c.strip("\n") for c in chunks]

    # -- limit -------------------------------------------------------------------------------------
    def _enforce_limit(self, piece: str) -> list[str]:
        if self.embedder.count_tokens(piece) <= self.limit:
            return [piece]
        offsets = self.embedder.token_offsets(piece)
        if not offsets:  # no offsets: cut by characters, conservatively
            step = max(1, self.limit * 3)
            return [piece[i : i + step] for i in range(0, len(piece), step)]
        out = []
        for i in range(0, len(offsets), self.limit):
            window = offsets[i : i + self.limit]
            out.append(piece[window[0][0] : window[-1][1]])
        return [p for p in out if p.strip()]


def _shift(spans: list[Any], offset: int) -> list[Any]:
    return [s if isinstance(s, str) else (s[0] + offset, s[1] + offset) for s in spans]


def _is_row(line: str) -> bool:
    line = line.strip()
    return len(line) >= 2 and line[0] == "|" and line[-1] == "|"


def _is_separator(line: str) -> bool:
    """A pipe table's second line: cells of '-' (at least three) with optional ':' for alignment."""
    if not _is_row(line):
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
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _is_row(line) and i + 1 < len(lines) and _is_separator(lines[i + 1]):
            start, j = offset, i + 2
            end = offset + len(line) + len(lines[i + 1])
            last = lines[i + 1]
            while j < len(lines) and _is_row(lines[j]):
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


def table_context(text: str, start: int, heads: Sequence[tuple[int, int, str]]) -> list[str]:
    """The lines that say what the table at ``start`` is: the nearest heading above it (as written;
    ``heads`` from ``headings(text)``) and its caption, the last line of the paragraph right above
    (when short and not that heading)."""
    out: list[str] = []
    n = bisect.bisect_left([h[0] for h in heads], start)
    if n:
        pos = heads[n - 1][0]
        out.append(text[pos:start].split("\n", 1)[0].strip())
    before_end = len(text[:start].rstrip())
    last = text[max(0, text.rfind("\n", 0, before_end) + 1):before_end].strip()
    if last and len(last) <= 200 and not _is_row(last) and (not out or last != out[-1]):
        out.append(last)
    return out


def locate_spans(text: str, chunks: list[str]) -> list[Any]:
    """(start, end) of each chunk in ``text`` searching forward (chunks overlap), else the chunk itself."""
    spans: list[Any] = []
    cursor = 0
    for chunk in chunks:
        pos = text.find(chunk, cursor)
        if pos < 0:
            pos = text.find(chunk)
        if pos < 0:
            spans.append(chunk)
            continue
        spans.append((pos, pos + len(chunk)))
        cursor = pos + 1
    return spans


# -- contextual chunk text ---------------------------------------------------------------------------
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
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
        if _FENCE.match(line):
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


@lru_cache(maxsize=256)
def _cached_headings(text: str) -> list[tuple[int, int, str]]:
    # keyed by the document's text object (its hash is computed once and kept by the str)
    return headings(text)


def heading_path(text: str, metadata: dict | None, span: Any) -> list[str]:
    """Where a chunk sits, for citations: the document's title and the headings in force where the
    chunk starts (``span``: ``(start, end)`` into ``text``, or a chunk's own text, located by its
    last line). Empty when the document has neither."""
    if isinstance(span, str):
        tail = span.rstrip().rsplit("\n", 1)[-1]
        offset = max(text.find(tail), 0) if tail else 0
    else:
        offset = span[0]
    title = document_title(metadata)
    path = [title.strip()] if title else []
    for name in section_path(_cached_headings(text), offset):
        if not path or name.strip().casefold() != path[-1].casefold():
            path.append(name.strip())
    return path


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
