"""Plain data types shared by the index, retrieval and chat code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RetrievedNode:
    """One retrieved chunk.

    ``score`` is always a similarity in [0, 1], higher is better: the cosine similarity of the chunk's
    embedding to the query's, negatives clamped to 0 (also for hits that only BM25 found). The order
    of a result list is the fused (reciprocal-rank) order when hybrid search is on, and the
    cross-encoder's order when reranking is on. ``dense_score`` repeats the cosine when the dense
    search found the chunk; ``sparse_score`` is the raw BM25 score when BM25 found it.

    KAITO reported FAISS squared L2 distances ``d2`` (lower = better). For unit vectors
    ``d2 = 2 - 2 * cos``, so a KAITO distance threshold ``d2`` corresponds to ``score >= 1 - d2 / 2``.
    """

    doc_id: str
    node_id: str
    text: str
    score: float
    metadata: dict
    dense_score: float | None = None
    sparse_score: float | None = None
    # The chunk's token counts stored at ingestion, by tokenizer identity (``TokenCounter.identity``);
    # for the chat budget only, never shown to clients.
    token_counts: dict[str, int] | None = None
    # Why it came back (``/retrieve`` with ``explain``): its place in the dense and keyword candidate
    # lists (1 = best; None = not in that list) and its fused score (None without hybrid search).
    dense_rank: int | None = None
    sparse_rank: int | None = None
    fused_score: float | None = None

    def to_source_node(self) -> dict:
        return {"doc_id": self.doc_id, "node_id": self.node_id, "text": self.text, "score": self.score,
                "metadata": self.metadata}

    def to_result(self, explain: bool = False) -> dict:
        out = {**self.to_source_node(), "dense_score": self.dense_score, "sparse_score": self.sparse_score}
        if explain:
            out.update(dense_rank=self.dense_rank, sparse_rank=self.sparse_rank, fused_score=self.fused_score)
        return out


def cosine_to_score(cos: float) -> float:
    """Cosine in [-1, 1] → the engine's score in [0, 1] (negatives clamp to 0: unrelated is 0)."""
    return float(min(1.0, max(0.0, cos)))


def kaito_l2_to_score(squared_l2: float) -> float:
    """A KAITO/FAISS squared L2 distance between unit vectors → the engine's similarity score."""
    return cosine_to_score(1.0 - squared_l2 / 2.0)


@dataclass(slots=True)
class DocRecord:
    """A stored document: its text, metadata and the slots (vector ids) of its chunks.

    ``spans`` holds, per chunk, ``(start, end)`` into ``text`` when the chunk is an exact span of the
    document (the usual case) or the chunk's own text otherwise, so chunk text is not stored twice.
    ``spans is None`` means one chunk that is the whole text (small documents: no list at all).
    """

    doc_id: str
    text: str
    metadata: dict
    slots: list[int]
    spans: list[Any] | None  # per chunk: (start, end) into text, or the chunk's own text
    # Per tokenizer identity, the token count of each chunk (stored at ingestion; None: never counted).
    tokens: dict[str, list[int]] | None = None
    # The document's structure (index/places.py), read by the first retrieval that places one of its chunks and
    # kept while the record lives (a record is replaced, never edited). Not stored: it is derived from ``text``.
    structure: Any = field(default=None, repr=False, compare=False)
    # Per chunk index, what a hit on it carries that never changes while the record lives: its node id and
    # metadata (place, citation). A chat turn builds a hundred hits, mostly chunks hit before; placing each
    # again was most of a fusion. Only chunks ever hit are kept. Not stored.
    hits: dict[int, tuple[str, dict]] | None = field(default=None, repr=False, compare=False)

    def chunk_tokens(self, i: int) -> dict[str, int] | None:
        if not self.tokens:
            return None
        return {key: counts[i] for key, counts in self.tokens.items() if i < len(counts)} or None

    def chunk_text(self, i: int) -> str:
        if self.spans is None:
            return self.text
        span = self.spans[i]
        return span if isinstance(span, str) else self.text[span[0]:span[1]]

    def span_list(self) -> list[Any]:
        """Spans in their JSON form (lists), with the whole-text case spelled out."""
        if self.spans is None:
            return [[0, len(self.text)]]
        return [list(s) if isinstance(s, tuple) else s for s in self.spans]


def compact_spans(text: str, spans: list[Any]) -> list[Any] | None:
    """JSON spans → stored form: None for one whole-text chunk, else tuples / strings."""
    if len(spans) == 1 and not isinstance(spans[0], str) and spans[0][0] == 0 and spans[0][1] == len(text):
        return None
    return [tuple(s) if isinstance(s, list) else s for s in spans]


@dataclass
class ChunkingConfig:
    """How an index splits documents; fixed when the index is created."""

    chunk_size: int = 0  # tokens; 0 = the embedder's limit
    chunk_overlap: int = 32
    splitter: str = "sentence"  # "sentence" | "token"
    code_chunk_lines: int = 40
    # Embed / keyword-index chunks with their document's title and section path. False when absent,
    # so indexes written before the option keep the texts their vectors were made from.
    contextual: bool = False
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"chunk_size": self.chunk_size, "chunk_overlap": self.chunk_overlap, "splitter": self.splitter,
                "code_chunk_lines": self.code_chunk_lines, "contextual": self.contextual}

    @classmethod
    def from_dict(cls, data: dict | None) -> ChunkingConfig:
        data = data or {}
        keys = ("chunk_size", "chunk_overlap", "splitter", "code_chunk_lines", "contextual")
        return cls(**{k: data[k] for k in keys if k in data})
