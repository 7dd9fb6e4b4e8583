"""Fusion of the dense and keyword (BM25) candidate lists into one ranking.

Pure functions, so every store backend (FAISS, PostgreSQL, Milvus) fuses the same way: give
``fuse`` each side's ``(key, score)`` list, best first, and it returns the fused ``(key, score)`` list.

Two methods (``FusionParams.method``):

- ``"rrf"``: weighted reciprocal-rank fusion, ``w / (k + rank_dense) + (1 - w) / (k + rank_sparse)``.
  ``w = 0.5`` orders exactly like the classic unweighted RRF (Cormack et al., 2009).
- ``"convex"``: a convex combination of normalised scores, ``w * dense + (1 - w) * sparse``, with the
  dense cosine min-max normalised over its list and BM25 divided by its list's maximum (its
  theoretical minimum is 0). Bruch et al. (2023, "An Analysis of Fusion Functions for Hybrid
  Retrieval") found this more accurate than RRF; docs/retrieval.md has the numbers for this engine.

A key missing from one list scores that list's floor (0 after normalisation; no RRF term).
Ties keep first appearance, dense before sparse, so fusion is deterministic.

How many candidates each side brings matters as much as the weights: a chunk just below one list's cut
scores that side's floor, so short lists mostly punish chunks that are good on both sides.
``candidate_pool`` says how many to fetch per side (docs/retrieval.md, "Fusion variants").
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ragengine.settings import EngineSettings

RRF_K = 60  # the constant from Cormack et al. (2009); damps the head of each list
# Candidates per side fused for 10 results: 50 beat 20 and 100 on the tuning set (docs/retrieval.md).
FUSION_CANDIDATES = 50
FUSION_METHODS = ("rrf", "convex")

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class FusionParams:
    """How to fuse: ``method`` ("rrf" | "convex"), ``dense_weight`` in [0, 1] (the rest goes to BM25),
    ``rrf_k`` (only for rrf)."""

    method: str = "convex"
    dense_weight: float = 0.85  # chosen on zaragoza-construction-faq, validated on the others (docs/retrieval.md)
    rrf_k: int = RRF_K

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise ValueError(f"fusion method must be one of {', '.join(FUSION_METHODS)}, not {self.method!r}")
        if not 0.0 <= self.dense_weight <= 1.0:
            raise ValueError("dense_weight must be in [0, 1]")
        if self.rrf_k < 1:
            raise ValueError("rrf_k must be at least 1")

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> FusionParams:
        """The engine settings' ``fusion``, ``fusion_dense_weight`` and ``rrf_k`` (defaults when absent)."""
        return cls(method=getattr(settings, "fusion", cls.method),
                   dense_weight=getattr(settings, "fusion_dense_weight", cls.dense_weight),
                   rrf_k=getattr(settings, "rrf_k", RRF_K))


def fuse(dense: Sequence[tuple[K, float]], sparse: Sequence[tuple[K, float]], *,
         params: FusionParams = FusionParams()) -> list[tuple[K, float]]:
    """Fuse ``dense`` ((key, cosine), best first) and ``sparse`` ((key, BM25 score), best first) into
    one list of (key, fused score), best first, each key once. Inputs are not modified."""
    w = params.dense_weight
    fused: dict[K, float] = {}
    if params.method == "rrf":
        for weight, ranked in ((w, dense), (1.0 - w, sparse)):
            for rank, (key, _) in enumerate(ranked, start=1):
                fused[key] = fused.get(key, 0.0) + weight / (params.rrf_k + rank)
    else:
        for weight, normed in ((w, _minmax(dense)), (1.0 - w, _by_max(sparse))):
            for key, value in normed:
                fused[key] = fused.get(key, 0.0) + weight * value
    return sorted(fused.items(), key=lambda kv: -kv[1])  # stable: ties keep first appearance


def ranks(keys: Sequence[K]) -> dict[K, int]:
    """Each key's place in a candidate list, best first, from 1: what ``/retrieve``'s explain shows per leg."""
    return {key: rank for rank, key in enumerate(keys, start=1)}


def candidate_pool(wanted: int, minimum: int = FUSION_CANDIDATES) -> int:
    """Candidates to fetch from each side (dense and BM25) for ``wanted`` fused results: twice as many,
    and never fewer than ``minimum`` (settings ``fusion_candidates``)."""
    return max(2 * wanted, minimum)


def _minmax(ranked: Sequence[tuple[K, float]]) -> list[tuple[K, float]]:
    if not ranked:
        return []
    values = [float(v) for _, v in ranked]
    lo, hi = min(values), max(values)
    span = hi - lo
    # One candidate (or all equal): each is as good as the best, which is what min-max would say at the top.
    return [(key, (v - lo) / span if span > 0 else 1.0) for (key, _), v in zip(ranked, values, strict=True)]


def _by_max(ranked: Sequence[tuple[K, float]]) -> list[tuple[K, float]]:
    hi = max((float(v) for _, v in ranked), default=0.0)
    return [(key, float(v) / hi if hi > 0 else 0.0) for key, v in ranked]


def rrf(*ranked: Sequence[int], k: int = RRF_K) -> list[tuple[int, float]]:
    """Unweighted RRF of ranked id lists: score(id) = sum over lists of 1 / (k + rank), rank from 1.
    Ties keep the order in which ids first appeared (dense first)."""
    scores: dict[int, float] = {}
    for ids in ranked:
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])
