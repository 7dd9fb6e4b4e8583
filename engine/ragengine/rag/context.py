"""Context selection: which retrieved chunks go into the prompt.

``ContextSelector`` is a llama-index node postprocessor (usable in any llama-index query or chat
engine); ``select_context`` applies the same rule to the engine's ``RetrievedNode`` list. The rule is
the seed's ContextSelectionProcessor: sort by score (highest first; ties keep the retrieval order),
drop chunks below the similarity threshold, skip a chunk that does not fit the remaining token
budget, keep filling greedily. The chosen chunks go into the prompt in that score order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field

log = logging.getLogger(__name__)


def _greedy(items: Sequence[Any], text_of, score_of, budget: int, count_tokens, threshold: float) -> list[Any]:
    chosen: list[Any] = []
    remaining = budget
    # The seed sorts by score before the fill; the hybrid index returns its fused rank order, in which a
    # chunk that only BM25 liked can come before a closer one. sorted() is stable: ties keep that order.
    for item in sorted(items, key=lambda i: score_of(i) or 0.0, reverse=True):
        if remaining <= 0:
            break
        if threshold and (score_of(item) or 0.0) < threshold:
            continue
        tokens = count_tokens(text_of(item))
        if tokens > remaining:
            continue  # too big for what is left; a smaller, less relevant chunk may still fit
        remaining -= tokens
        chosen.append(item)
    log.debug("selected %d of %d chunks, %d of %d tokens", len(chosen), len(items), budget - remaining, budget)
    return chosen


class ContextSelector(BaseNodePostprocessor):
    """Score order, threshold and token budget (the seed's rule) over any nodes."""

    budget_tokens: int = Field(description="Tokens the selected chunks may use together.")
    similarity_threshold: float = Field(0.0, description="Minimum similarity score in [0, 1].")
    count_tokens: Callable[[str], int] = Field(description="The served model's token counter.")

    @classmethod
    def class_name(cls) -> str:
        return "ContextSelector"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        return _greedy(
            nodes, lambda n: n.node.get_content(), lambda n: n.score, self.budget_tokens, self.count_tokens,
            self.similarity_threshold,
        )


def select_context(nodes, budget_tokens: int, count_tokens: Callable[[str], int], similarity_threshold: float) -> list:
    """``RetrievedNode`` version of ``ContextSelector`` (same rule, without converting every node)."""
    return _greedy(nodes, lambda n: n.text, lambda n: n.score, budget_tokens, count_tokens, similarity_threshold)


def as_llama_nodes(nodes) -> list[NodeWithScore]:
    """``RetrievedNode`` → llama-index ``NodeWithScore`` (for use with llama-index components)."""
    return [
        NodeWithScore(node=TextNode(id_=n.node_id, text=n.text, metadata=dict(n.metadata), ref_doc_id=n.doc_id), score=n.score)
        for n in nodes
    ]
