"""Context selection: which retrieved chunks go into the prompt.

The rule is the seed's ContextSelectionProcessor: sort by score (highest first; ties keep the retrieval
order), drop chunks below the similarity threshold, skip a chunk that does not fit the remaining token
budget, keep filling greedily. The chosen chunks go into the prompt in that score order.

``select_context`` applies it to the engine's ``RetrievedNode`` list; ``rag.llama_postprocessor`` has
the same rule as a llama-index node postprocessor, kept apart so that chat never imports llama-index
(whose import costs seconds of start-up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)


def greedy_fill(items: Sequence[Any], text_of, score_of, budget: int, count_tokens, threshold: float) -> list[Any]:
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


def select_context(nodes, budget_tokens: int, count_tokens: Callable[[str], int], similarity_threshold: float) -> list:
    """The rule over ``RetrievedNode``s (``count_tokens``: the served model's counts)."""
    return greedy_fill(nodes, lambda n: n.text, lambda n: n.score, budget_tokens, count_tokens, similarity_threshold)
