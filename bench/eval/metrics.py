"""Ranking metrics at a cutoff, scored per document ("passage level": a document counts at the rank of
its best-ranked chunk; its later chunks neither help nor hurt).

``ranked`` is the list of document ids of the returned chunks in result order (repeats allowed);
``relevant`` the set of relevant document ids. Binary relevance throughout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def first_ranks(ranked: Sequence[str], relevant: Iterable[str], k: int) -> dict[str, int]:
    """Rank (from 1, by result position) of the best chunk of each relevant document in the top ``k``."""
    wanted = set(relevant)
    out: dict[str, int] = {}
    for pos, doc in enumerate(ranked[:k], start=1):
        if doc in wanted and doc not in out:
            out[doc] = pos
    return out


def mrr(ranked: Sequence[str], relevant: Iterable[str], k: int = 10) -> float:
    """1 / rank of the first relevant document in the top ``k``; 0 when none."""
    ranks = first_ranks(ranked, relevant, k)
    return 1.0 / min(ranks.values()) if ranks else 0.0


def recall(ranked: Sequence[str], relevant: Iterable[str], k: int = 10) -> float:
    """Share of the relevant documents found in the top ``k`` (0 for an empty relevant set)."""
    relevant = set(relevant)
    return len(first_ranks(ranked, relevant, k)) / len(relevant) if relevant else 0.0


def ndcg(ranked: Sequence[str], relevant: Iterable[str], k: int = 10) -> float:
    """nDCG@k: gain 1 at each relevant document's first rank, log2 discount, over the ideal ranking."""
    relevant = set(relevant)
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(rank + 1) for rank in first_ranks(ranked, relevant, k).values())
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant), k) + 1))
    return dcg / ideal


def summarise(runs: Sequence[tuple[Sequence[str], Iterable[str]]], k: int = 10) -> dict[str, float]:
    """Mean MRR@k, Recall@k and nDCG@k over (ranked, relevant) pairs."""
    runs = [(r, set(rel)) for r, rel in runs]
    n = max(len(runs), 1)
    return {f"mrr@{k}": sum(mrr(r, rel, k) for r, rel in runs) / n,
            f"recall@{k}": sum(recall(r, rel, k) for r, rel in runs) / n,
            f"ndcg@{k}": sum(ndcg(r, rel, k) for r, rel in runs) / n}
