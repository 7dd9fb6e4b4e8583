"""The retrieval evaluation's ranking metrics: the engine's own (``ragengine.evaluation.metrics``), so
``make eval``'s figures and the product's evaluations (docs/evaluation.md) are computed by one
implementation. Passage level: a document counts at the rank of its best chunk."""

from __future__ import annotations

from ragengine.evaluation.metrics import first_ranks, hit, mrr, ndcg, recall, summarise

__all__ = ["first_ranks", "hit", "mrr", "ndcg", "recall", "summarise"]
