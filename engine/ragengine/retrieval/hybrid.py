"""Reciprocal-rank fusion of the dense and BM25 candidate lists."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60  # the constant from Cormack et al. (2009); damps the head of each list


def rrf(*ranked: Sequence[K], k: int = RRF_K) -> list[tuple[K, float]]:
    """Fuse ranked id lists: score(id) = sum over lists of 1 / (k + rank), rank from 1. Ties keep the
    order in which ids first appeared (dense first), so fusion is deterministic."""
    scores: dict[K, float] = {}
    for ids in ranked:
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])
