"""Ranking metrics at a cutoff, scored per document ("passage level"): a document counts at the rank of its
best-ranked chunk; its later chunks neither help nor hurt. Pure.

One implementation for the product (``POST /indexes/{name}/evaluations``) and ``make eval``
(bench/eval/metrics.py re-exports it), so the published figures and a user's scores mean the same.

``ranked`` is the list of document ids of the returned chunks in result order (repeats allowed: that is
what ``/retrieve`` returns); ``relevant`` the set of relevant document ids. Binary relevance throughout.
Ranks are result positions, so a document's repeated chunks push the next document down, exactly as a
client reading ``/retrieve`` sees it (trec_eval-style libraries rank unique documents instead:
docs/evaluation.md says why the definitions here are written out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

METRICS = ("mrr", "recall", "ndcg", "hit_rate")


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


def hit(ranked: Sequence[str], relevant: Iterable[str], k: int = 10) -> float:
    """1 when any relevant document is in the top ``k``, else 0 (its mean is the hit rate)."""
    return 1.0 if first_ranks(ranked, relevant, k) else 0.0


def summarise(runs: Sequence[tuple[Sequence[str], Iterable[str]]], k: int = 10) -> dict[str, float]:
    """Mean MRR@k, Recall@k and nDCG@k over (ranked, relevant) pairs (``make eval``'s table)."""
    runs = [(r, set(rel)) for r, rel in runs]
    n = max(len(runs), 1)
    return {f"mrr@{k}": sum(mrr(r, rel, k) for r, rel in runs) / n,
            f"recall@{k}": sum(recall(r, rel, k) for r, rel in runs) / n,
            f"ndcg@{k}": sum(ndcg(r, rel, k) for r, rel in runs) / n}


def score_question(ranked: Sequence[str], relevant: Iterable[str], k: int) -> dict:
    """One question's scores and the rank of its first relevant document (None: none in the top ``k``)."""
    relevant = set(relevant)
    ranks = first_ranks(ranked, relevant, k)
    return {"first_relevant_rank": min(ranks.values()) if ranks else None,
            "mrr": mrr(ranked, relevant, k), "recall": recall(ranked, relevant, k),
            "ndcg": ndcg(ranked, relevant, k), "hit_rate": hit(ranked, relevant, k)}


def aggregate(scores: Sequence[dict], k: int) -> dict[str, float]:
    """The mean of each metric over questions (``score_question`` outputs), named ``<metric>@k``."""
    n = max(len(scores), 1)
    return {f"{m}@{k}": sum(s[m] for s in scores) / n for m in METRICS}


def metric_name(name: str) -> tuple[str, int]:
    """``"mrr@10"`` -> ("mrr", 10); ValueError naming the accepted forms otherwise."""
    base, _, cut = name.strip().lower().partition("@")
    if base not in METRICS or not cut.isdigit() or int(cut) < 1:
        raise ValueError(f"{name!r} is not a metric: use one of {', '.join(m + '@<k>' for m in METRICS)}, "
                         "e.g. mrr@10")
    return base, int(cut)


def outcome(scores: dict) -> tuple[float, float, float]:
    """What "better" means for one question between two runs: reciprocal rank first, then recall, then nDCG."""
    return (round(scores["mrr"], 9), round(scores["recall"], 9), round(scores["ndcg"], 9))
