"""Split documents into chunks the embedding model sees whole.

Prose goes through llama-index's ``SentenceSplitter`` (or ``TokenTextSplitter``), code through
``CodeSplitter`` (tree-sitter) when metadata says ``split_type: code`` with a ``language``. Token counts
always come from the embedding model's own tokenizer, and every chunk is checked against the model's
limit afterwards: a chunk that would be truncated silently (KAITO's 1024-token chunks on a 256-token
model) is cut again at token boundaries. Chunks are returned as ``(start, end)`` spans into the text
where they are exact substrings, so the engine keeps one copy of the text.

Structure first (``index/structure.py``): the text is cut at its section headings and its page, slide
and sheet labels, each part is split on its own, and only small neighbours that share a parent are
merged, so a chunk's heading path and page are where its text is (``index/places.py``). A part that
fits ``chunk_size`` is one chunk; a larger one goes through the splitters below.

Tables (Markdown pipe tables: what ``ragengine.parsing`` makes of DOCX, PPTX, XLSX, CSV and PDF
tables, and what people write) are kept whole when they fit ``chunk_size``; a larger one is split by
rows, and every piece repeats the table's nearest heading, its caption (the line right above it) and
its header row, so no piece of a table loses what its numbers mean (``table_blocks``,
``Chunker._table``). Those pieces are not substrings of the text: they are stored as their own text.

Contextual chunks (chunking option ``contextual``) get their text from ``index/contextual.py``; here the
chunk's token budget leaves room for that text's prefix (``CONTEXT_TOKENS``).
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ragengine.errors import BadRequest
from ragengine.index.contextual import CONTEXT_TOKENS, atx_heading, headings
from ragengine.index.structure import has_content, is_row, stretches, table_blocks
from ragengine.index.types import ChunkingConfig
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder

log = logging.getLogger(__name__)

SPLITTERS = ("sentence", "token")
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


def new_index_config(settings: EngineSettings, chunking: dict | None, token_limit: int) -> ChunkingConfig:
    """A new index's chunking: the request's ``chunking`` over the engine's defaults, validated."""
    defaults = {"chunk_size": settings.chunk_size, "chunk_overlap": settings.chunk_overlap,
                "contextual": settings.chunk_context}
    return validate_config(ChunkingConfig.from_dict({**defaults, **(chunking or {})}), token_limit)


class Chunker:
    """Chunks for one index: ``split(text, metadata) -> list[span]`` (span = (start, end) or str)."""

    def __init__(self, embedder: Embedder, config: ChunkingConfig) -> None:
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
        spans: list[Any] = []
        heads: list[tuple[int, int, str]] | None = None
        for start, end, tokens in stretches(text, self.embedder.count_tokens, self.config.chunk_size):
            if tokens <= self.config.chunk_size:  # one chunk (a table that fits stays whole in it)
                if (span := _trimmed(text, start, end)) is not None:
                    spans.append(span)
                continue
            if heads is None:
                heads = headings(text)
            spans += self._split_stretch(text, start, end, heads)
        return spans

    def _split_stretch(self, text: str, start: int, end: int, heads: Sequence[tuple[int, int, str]]) -> list[Any]:
        """``text[start:end]`` in chunks: its tables whole with their caption (the line above) or by rows,
        the prose between them by sentences. Prose that is only a split table's heading and caption is
        left out: every piece of the table repeats it."""
        spans: list[Any] = []
        cursor = start
        for t_start, t_end in table_blocks(text[start:end]):
            t_start, t_end = t_start + start, t_end + start
            caption = caption_start(text, cursor, t_start)
            head = t_start if caption is None else caption
            if self.embedder.count_tokens(text[head:t_end]) <= self.config.chunk_size:
                spans += _shift(self._prose(text[cursor:head]), cursor)
                spans.append((head, t_end))
            else:
                if has_content(text, cursor, head):
                    spans += _shift(self._prose(text[cursor:t_start]), cursor)
                spans += self._table(text, t_start, t_end, heads)
            cursor = t_end
        return spans + _shift(self._prose(text[cursor:end]), cursor)

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


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    """``(start, end)`` without the whitespace at either end; None when nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _shift(spans: list[Any], offset: int) -> list[Any]:
    return [s if isinstance(s, str) else (s[0] + offset, s[1] + offset) for s in spans]


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
    if last and len(last) <= 200 and not is_row(last) and (not out or last != out[-1]):
        out.append(last)
    return out


def caption_start(text: str, lo: int, start: int) -> int | None:
    """Where the caption of the table at ``start`` begins: the line right above it (after at most a
    blank line), when it is short and neither a heading nor a table row, and not before ``lo``."""
    before_end = len(text[:start].rstrip())
    line_start = text.rfind("\n", 0, before_end) + 1
    line = text[line_start:before_end].strip()
    if (line_start < lo or not line or len(line) > 200 or is_row(line) or atx_heading(line)
            or text.count("\n", before_end, start) > 2):
        return None
    return line_start


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
