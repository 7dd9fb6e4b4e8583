"""Context selection (llama-index postprocessor and RetrievedNode form) and the extractive fallback."""

from llama_index.core.schema import NodeWithScore, TextNode

from ragengine.rag.context import select_context
from ragengine.rag.extractive import extractive_answer, split_sentences
from ragengine.rag.llama_postprocessor import ContextSelector, as_llama_nodes
from tests.chat.conftest import node


def words(text: str) -> int:
    return len(text.split())


NODES = [node("a", "one two three", 0.9), node("b", "w " * 10, 0.8), node("c", "four five", 0.6),
         node("d", "six", 0.2)]


def test_greedy_fill_skips_what_does_not_fit():
    assert [n.doc_id for n in select_context(NODES, 6, words, 0.0)] == ["a", "c", "d"]


def test_threshold_and_order_kept():
    assert [n.doc_id for n in select_context(NODES, 100, words, 0.5)] == ["a", "b", "c"]


def test_zero_budget_selects_nothing():
    assert select_context(NODES, 0, words, 0.0) == []


def test_llama_index_postprocessor_same_rule():
    selector = ContextSelector(budget_tokens=6, similarity_threshold=0.0, count_tokens=words)
    out = selector.postprocess_nodes(as_llama_nodes(NODES))
    assert [n.node.node_id for n in out] == ["a-n0", "c-n0", "d-n0"]
    assert isinstance(out[0], NodeWithScore) and isinstance(out[0].node, TextNode)
    assert [n.node.node_id for n in ContextSelector(budget_tokens=100, similarity_threshold=0.7,
                                                     count_tokens=words).postprocess_nodes(as_llama_nodes(NODES))] \
        == ["a-n0", "b-n0"]


def test_extractive_picks_relevant_sentences():
    nodes = [node("k", "KAITO is a Kubernetes operator. It was started in 2023. Lunch is at noon.", 0.8),
             node("f", "FAISS does vector similarity search. It is written in C++.", 0.5)]
    answer = extractive_answer("What does FAISS do?", nodes, max_sentences=1)
    assert answer == "FAISS does vector similarity search."
    assert len(split_sentences(extractive_answer("KAITO operator", nodes))) == 3
    assert extractive_answer("anything", []) == ""


def test_context_template_is_llama_index_own():
    """chat.plan keeps a copy of llama-index's context template (so chat does not import llama-index)."""
    from llama_index.core.chat_engine.context import DEFAULT_CONTEXT_TEMPLATE
    from llama_index.core.prompts import PromptTemplate

    from ragengine.chat.plan import CONTEXT_TEMPLATE, build_messages

    texts = ["A chunk with {braces} and a {context_str} of its own.", "Another chunk."]
    system = build_messages([], "q", texts)[0]["content"]
    assert CONTEXT_TEMPLATE == DEFAULT_CONTEXT_TEMPLATE
    assert system == PromptTemplate(DEFAULT_CONTEXT_TEMPLATE).format(context_str="\n\n".join(texts))
