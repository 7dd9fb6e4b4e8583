"""Questions longer than the embedding model's window.

A local model reads at most its window (all-MiniLM-L6-v2: 256 tokens with [CLS] and [SEP]); the
tokenizer drops the rest, so a long question (a pasted ticket, a customer scenario) used to be searched
by its first 254 tokens only. With ``long_query_windows`` (off by default) such a question is cut into
consecutive windows of the model's size, all embedded in one forward pass, and their vectors are
averaged weighted by their tokens: for a mean-pooled model that is the vector of the whole text,
computed window by window. A question that fits the window is embedded exactly as before, and so is
every question of a remote model (whose tokenizer the engine does not know). BM25 always saw the whole
question. docs/retrieval.md ("Long questions") has the evaluation: +0.064 MRR@10 on the one set with long
questions, no change on the others; a question of n windows costs about n times the embedding, so at
most ``MAX_WINDOWS`` windows (4,064 tokens for MiniLM; the longest evaluation question needs 7) are
embedded and the rest of a longer text is left to BM25: a pasted book must not cost a thousand passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ragengine.observability import tracing
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder

MAX_WINDOWS = 16  # see the module docstring


def window_spans(offsets: Sequence[tuple[int, int]], size: int,
                 max_windows: int = MAX_WINDOWS) -> list[tuple[int, int, int]]:
    """``(start, end, tokens)`` character spans of consecutive windows of at most ``size`` tokens that
    together cover every token (``offsets``: each token's character span, in order), the first
    ``max_windows`` of them."""
    if size < 1:
        raise ValueError("size must be at least 1")
    spans = []
    for first in range(0, min(len(offsets), size * max_windows), size):
        last = min(first + size, len(offsets)) - 1
        spans.append((offsets[first][0], offsets[last][1], last - first + 1))
    return spans


def pool_windows(vectors: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """The token-weighted mean of the windows' vectors, normalised to unit length."""
    weights = np.asarray(tokens, dtype=np.float32)[:, None]
    mean = (np.asarray(vectors, dtype=np.float32) * weights).sum(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else mean


def pieces(embedder: Embedder, text: str) -> list[tuple[str, int]] | None:
    """The windows ``(text, tokens)`` to embed for ``text``, or None when it is embedded whole (it fits
    the model's window, or the embedder has no local tokenizer)."""
    limit = int(getattr(embedder, "chunk_token_limit", 0) or 0)
    if limit < 1 or len(text) <= limit:  # every token spans at least one character: it fits, skip tokenising
        return None
    offsets_of = getattr(embedder, "token_offsets", None)
    offsets = offsets_of(text) if offsets_of is not None else None
    if not offsets or len(offsets) <= limit:
        return None
    return [(text[start:end], n) for start, end, n in window_spans(offsets, limit)]


async def query_vector(embedder: Embedder, settings: EngineSettings, query: str, query_embedding: np.ndarray | None,
                       long_query_windows: bool | None) -> np.ndarray:
    """A retrieval's unit query vector, the same on every store: the caller's ``query_embedding``
    normalised, else ``query`` embedded, in windows when the request (or else the settings) asks."""
    if query_embedding is not None:
        vector = np.asarray(query_embedding, dtype=np.float32).reshape(-1)
        return vector / max(float(np.linalg.norm(vector)), 1e-12)
    windows = settings.long_query_windows if long_query_windows is None else long_query_windows
    with tracing.stage("embedding", kind="query", model_kind=getattr(embedder, "kind", None)) as span:
        return await embed_query(embedder, query, windows=windows, span=span)


async def embed_query(embedder: Embedder, text: str, *, windows: bool, span: Any = None) -> np.ndarray:
    """The query vector of ``text``: whole (cut at the model's window) unless ``windows`` and it is longer."""
    cut = pieces(embedder, text) if windows else None
    if span is not None:
        tracing.annotate(span, windows=len(cut) if cut else 1)
    if cut is None:
        return await embedder.embed_query(text)
    vectors = await embedder.embed_query_batch([piece for piece, _ in cut])  # one forward pass
    return pool_windows(np.stack(vectors), [n for _, n in cut])


def embed_queries_sync(embedder: Embedder, texts: list[str], *, windows: bool) -> np.ndarray:
    """``embed_query`` for many texts in one batch (the evaluation's path; same vectors)."""
    if not windows:
        return embedder.embed_queries_sync(texts)
    plans = [pieces(embedder, t) or [(t, 1)] for t in texts]
    flat = [piece for plan in plans for piece, _ in plan]
    vectors = embedder.embed_queries_sync(flat) if flat else np.zeros((0, embedder.dim), np.float32)
    out, pos = [], 0
    for plan in plans:
        out.append(pool_windows(vectors[pos:pos + len(plan)], [n for _, n in plan]))
        pos += len(plan)
    return np.stack(out) if out else np.zeros((0, embedder.dim), np.float32)
