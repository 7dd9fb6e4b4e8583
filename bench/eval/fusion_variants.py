"""Fusion functions tried against the engine's ``retrieval.hybrid.fuse`` (docs/retrieval.md, "Fusion variants").

Each variant is a pure function ``(dense, sparse, query_terms) -> [(key, score)]`` over the same inputs the
engine fuses: ``dense`` is ``[(key, cosine)]`` best first, ``sparse`` is ``[(key, BM25)]`` best first, and
``query_terms`` is the number of BM25 terms in the query (a query feature, not a per-set knob). Only the
variant that wins on the tuning set and holds on the validation sets moves into the engine.

Normalisations (applied per candidate list):
- ``minmax``: (v - min) / (max - min);  ``by_max``: v / max (BM25's floor is 0);
- ``zscore``: (v - mean) / std;  ``rank``: 1 - (rank - 1) / len (a rank-based score in (0, 1]);
- ``cosine``: the dense cosine as it is ("dense-score-calibrated": BM25 is added in cosine units).
A key missing from one list gets that list's floor: 0 for minmax / by_max / rank, the list's minimum for
zscore, and for ``cosine`` the lowest cosine in the dense list (an upper bound of its true cosine, as
the dense list is the exact top n).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

Ranked = Sequence[tuple[Hashable, float]]
Fused = list[tuple[Hashable, float]]


def _norm(ranked: Ranked, how: str) -> tuple[dict[Hashable, float], float]:
    """(key -> normalised score, the floor given to keys missing from this list)."""
    if not ranked:
        return {}, 0.0
    values = [float(v) for _, v in ranked]
    keys = [k for k, _ in ranked]
    if how == "minmax":
        lo, hi = min(values), max(values)
        span = hi - lo
        return {k: (v - lo) / span if span > 0 else 1.0 for k, v in zip(keys, values, strict=True)}, 0.0
    if how == "by_max":
        hi = max(values)
        return {k: v / hi if hi > 0 else 0.0 for k, v in zip(keys, values, strict=True)}, 0.0
    if how == "zscore":
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) or 1.0
        z = {k: (v - mean) / std for k, v in zip(keys, values, strict=True)}
        return z, min(z.values())
    if how == "rank":
        n = len(values)
        return {k: 1.0 - i / n for i, k in enumerate(keys)}, 0.0
    if how == "cosine":
        return dict(zip(keys, values, strict=True)), min(values)
    raise ValueError(how)


def combine(dense: Ranked, sparse: Ranked, w_dense: float, w_sparse: float, dense_norm: str, sparse_norm: str) -> Fused:
    """``w_dense * norm(dense) + w_sparse * norm(sparse)``; missing keys take the list's floor."""
    d, d_floor = _norm(dense, dense_norm)
    s, s_floor = _norm(sparse, sparse_norm)
    keys = list(d) + [k for k in s if k not in d]
    fused = {k: w_dense * d.get(k, d_floor) + w_sparse * s.get(k, s_floor) for k in keys}
    return sorted(fused.items(), key=lambda kv: -kv[1])


def margin_gate(dense: Ranked, sparse: Ranked, delta: float, beta: float) -> Fused:
    """Dense order, except that among the dense candidates within ``delta`` cosine of the best one BM25
    (divided by its list's maximum) adds ``beta`` at most: BM25 only breaks near-ties at the top."""
    if not dense:
        return list(sparse)
    top = float(dense[0][1])
    s, _ = _norm(sparse, "by_max")
    fused = {k: float(c) + (beta * s.get(k, 0.0) if float(c) >= top - delta else 0.0) for k, c in dense}
    tail = [(k, v) for k, v in sparse if k not in fused]
    floor = min(fused.values())
    fused.update({k: floor - 1.0 - i for i, (k, _) in enumerate(tail)})  # BM25-only hits after every dense one
    return sorted(fused.items(), key=lambda kv: -kv[1])


def length_scaled(beta: float, ref_terms: int, query_terms: int) -> float:
    """A BM25 weight that shrinks for long queries: ``beta`` up to ``ref_terms`` query terms, then
    ``beta * ref_terms / query_terms`` (long scenario-like queries match many incidental words)."""
    return beta * min(1.0, ref_terms / max(query_terms, 1))


def variants() -> dict[str, tuple[str, str, Callable[[Ranked, Ranked, int], Fused]]]:
    """Every variant of the exploration: name -> (family, its parameters, function). ``convex minmax/by_max``
    is the engine's ``convex`` and ``rrf`` the engine's ``rrf`` (both call ``retrieval.hybrid.fuse``)."""
    from ragengine.retrieval.hybrid import FusionParams, fuse

    out: dict[str, tuple[str, str, Callable[[Ranked, Ranked, int], Fused]]] = {}

    def add(family: str, params: str, fn: Callable[[Ranked, Ranked, int], Fused]) -> None:
        out[f"{family} [{params}]"] = (family, params, fn)

    for w in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        for k in (10, 30, 60):
            fp = FusionParams(method="rrf", dense_weight=w, rrf_k=k)
            add("rrf (engine)", f"w={w} k={k}", lambda d, s, _n, fp=fp: fuse(d, s, params=fp))
    for dn in ("minmax", "zscore", "rank"):
        for sn in ("by_max", "minmax", "zscore", "rank"):
            for w in (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95):
                family = f"convex {dn}/{sn}" + (" (engine)" if (dn, sn) == ("minmax", "by_max") else "")
                add(family, f"w={w}", _bind(combine, w_dense=w, w_sparse=1 - w, dense_norm=dn, sparse_norm=sn))
    for beta in (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2):
        for sn in ("by_max", "minmax", "rank"):
            add(f"cosine + beta*bm25 {sn}", f"beta={beta}",
                _bind(combine, w_dense=1.0, w_sparse=beta, dense_norm="cosine", sparse_norm=sn))
    for delta in (0.01, 0.02, 0.05, 0.1):
        for beta in (0.02, 0.05, 0.1):
            add("margin gate (BM25 only within delta of the top cosine)", f"delta={delta} beta={beta}",
                _bind(margin_gate, delta=delta, beta=beta))
    for ref in (8, 16, 32):
        for beta in (0.05, 0.075, 0.1, 0.15, 0.2):
            add("cosine + beta*min(1, L/terms)*bm25 by_max", f"beta={beta} L={ref}", _length_bound(beta, ref, "cosine", 1.0))
        for w in (0.6, 0.7, 0.75):
            add("convex minmax/by_max, bm25 share*min(1, L/terms)", f"w={w} L={ref}", _length_bound(1 - w, ref, "minmax", w))
    return out


def _bind(fn: Callable[..., Fused], **kw: Any) -> Callable[[Ranked, Ranked, int], Fused]:
    return lambda d, s, _n: fn(d, s, **kw)


def _length_bound(beta: float, ref: int, dense_norm: str, w_dense: float) -> Callable[[Ranked, Ranked, int], Fused]:
    return lambda d, s, n: combine(d, s, w_dense, length_scaled(beta, ref, n), dense_norm, "by_max")
