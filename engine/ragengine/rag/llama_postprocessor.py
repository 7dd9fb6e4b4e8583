"""The context-selection rule (``rag.context``) as a llama-index node postprocessor, usable in any llama-index
query or chat engine; the engine itself applies the rule with ``rag.context.select_context``."""

from __future__ import annotations

from collections.abc import Callable

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from ragengine.rag.context import greedy_fill


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
        return greedy_fill(
            nodes, lambda n: n.node.get_content(), lambda n: n.score, self.budget_tokens, self.count_tokens,
            self.similarity_threshold,
        )


def as_llama_nodes(nodes) -> list[NodeWithScore]:
    """``RetrievedNode`` → llama-index ``NodeWithScore`` (for use with llama-index components)."""
    return [
        NodeWithScore(node=TextNode(id_=n.node_id, text=n.text, metadata=dict(n.metadata), ref_doc_id=n.doc_id), score=n.score)
        for n in nodes
    ]
