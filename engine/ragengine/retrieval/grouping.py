"""Document-level results: keep at most N chunks of each document in a ranked list."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

# How many candidates per wanted result a capped search fetches, so that dropping a document's extra
# chunks still leaves enough distinct documents (docs/retrieval.md measures the effect).
OVERFETCH = 4


def cap_per_document(ranked: Iterable[T], max_per_document: int | None, doc_of: Callable[[T], str]) -> list[T]:
    """``ranked`` in order, without the chunks beyond the first ``max_per_document`` of each document
    (``doc_of`` names an item's document). ``None`` keeps everything."""
    ranked = list(ranked)
    if max_per_document is None:
        return ranked
    if max_per_document < 1:
        raise ValueError("max_per_document must be at least 1")
    seen: dict[str, int] = {}
    out = []
    for item in ranked:
        doc = doc_of(item)
        if seen.get(doc, 0) < max_per_document:
            seen[doc] = seen.get(doc, 0) + 1
            out.append(item)
    return out
