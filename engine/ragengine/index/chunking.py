"""Split documents into chunks the embedding model sees whole.

Prose goes through llama-index's ``SentenceSplitter`` (or ``TokenTextSplitter``), code through
``CodeSplitter`` (tree-sitter) when metadata says ``split_type: code`` with a ``language``. Token counts
always come from the embedding model's own tokenizer, and every chunk is checked against the model's
limit afterwards: a chunk that would be truncated silently (KAITO's 1024-token chunks on a 256-token
model) is cut again at token boundaries. Chunks are returned as ``(start, end)`` spans into the text
where they are exact substrings, so the engine keeps one copy of the text.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

from llama_index.core.node_parser import SentenceSplitter, TokenTextSplitter

from ragengine.errors import BadRequest
from ragengine.index.types import ChunkingConfig

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
                          code_chunk_lines=max(1, config.code_chunk_lines))


class Chunker:
    """Chunks for one index: ``split(text, metadata) -> list[span]`` (span = (start, end) or str)."""

    def __init__(self, embedder: Any, config: ChunkingConfig) -> None:
        self.embedder = embedder
        self.limit = embedder.chunk_token_limit
        self.config = validate_config(config, self.limit)
        tok = embedder.token_ids
        size, overlap = self.config.chunk_size, self.config.chunk_overlap
        self._token = TokenTextSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=tok)
        self._prose = self._token if self.config.splitter == "token" else SentenceSplitter(
            chunk_size=size, chunk_overlap=overlap, tokenizer=tok, chunking_tokenizer_fn=split_sentences)
        self._code: dict[str, Any] = {}

    def split(self, text: str, metadata: dict | None) -> list[Any]:
        metadata = metadata or {}
        if metadata.get("split_type") == "code":
            language = metadata.get("language")
            if not language or not isinstance(language, str):
                raise BadRequest(
                    "Language not specified in node metadata: documents with split_type 'code' need a "
                    "'language' (for example 'python')."
                )
            pieces = self._split_code(text, language.lower())
        else:
            try:
                pieces = self._prose.split_text(text)
            except Exception as exc:
                log.warning("sentence splitting failed (%s); splitting by tokens", exc)
                pieces = self._token.split_text(text)
        bounded: list[str] = []
        for piece in pieces:
            if piece.strip():
                bounded.extend(self._enforce_limit(piece))
        return locate_spans(text, bounded)

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
