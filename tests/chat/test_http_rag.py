"""The chat endpoint's RAG path over real HTTP: engine (uvicorn) → fake vLLM (uvicorn), asserting what the
LLM received: context, history, token budget, retrieval parameters and metrics."""

from __future__ import annotations

import httpx

from tests.chat.chat_client import SYSTEM, post
from tests.chat.conftest import DOCS, FakeRegistry, default_registry, node
from tests.llm_server import count_message_tokens
from tests.support.stores import EVERY_STORE, ON_FAISS

# The LLM, the budget and validation do not depend on the store: FAISS only, except where marked.
pytestmark = ON_FAISS

TEXTS = [d[1] for d in DOCS]  # the engine fixture runs with similarity_threshold 0
# What the LLM must receive, spelled out: llama-index's context layout in the system message (pinned
# against llama-index's own template in test_context.py), the caller's system prompt after it.
# FakeRegistry's order (DOCS, by their fixed scores):
KAITO_CONTEXT = (
    "Use the context information below to assist the user.\n--------------------\n"
    "KAITO is a Kubernetes operator that automates AI model deployment.\n\n"
    "KAITO provisions GPU nodes with Karpenter and runs vLLM for inference on them.\n\n"
    "FAISS is a library for efficient similarity search of dense vectors.\n\n"
    "The cafeteria serves soup on Tuesdays.\n--------------------\n")
# The real index's order for "What is KAITO?" (the packaged model scores the cafeteria above FAISS):
REAL_ORDER = ["kaito-1", "kaito-2", "misc-1", "faiss-1"]
REAL_CONTEXT = (
    "Use the context information below to assist the user.\n--------------------\n"
    "KAITO is a Kubernetes operator that automates AI model deployment.\n\n"
    "KAITO provisions GPU nodes with Karpenter and runs vLLM for inference on them.\n\n"
    "The cafeteria serves soup on Tuesdays.\n\n"
    "FAISS is a library for efficient similarity search of dense vectors.\n--------------------\n")


@EVERY_STORE
def test_rag_sends_context_query_and_history(engine, fake_llm):
    base = engine()
    msgs = [SYSTEM, {"role": "user", "content": "What is KAITO?"}]
    r = post(base, {"index_name": "docs", "messages": msgs})
    assert r.status_code == 200, r.text
    sent = fake_llm.last_chat()
    body = r.json()
    # The real index: every chunk above the (zero) threshold, in score order, the KAITO chunks first.
    chosen = body["source_nodes"]
    assert {s["doc_id"] for s in chosen} == {d[0] for d in DOCS} and chosen[0]["doc_id"].startswith("kaito")
    assert [s["score"] for s in chosen] == sorted((s["score"] for s in chosen), reverse=True)
    # Exactly: the served model (discovered), the llama-index context layout, nothing else added.
    assert [s["doc_id"] for s in chosen] == REAL_ORDER
    assert sent == {"model": "fake-llm", "messages": [
        {"role": "system", "content": REAL_CONTEXT + "You are a helpful assistant."},
        {"role": "user", "content": "What is KAITO?"}]}
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "Echo : What is KAITO ?"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == count_message_tokens(sent["messages"])  # the LLM's own usage
    assert set(body["source_nodes"][0]) == {"doc_id", "node_id", "text", "score", "metadata"}
    assert body["generation_method"] == "llm"
    rag = body["rag"]
    assert rag["applied"] is True and rag["endpoint"] == fake_llm_url(engine)
    assert rag["top_k"] == 100 and rag["token_counter"] == "vllm"
    assert rag["prompt_tokens"] == count_message_tokens(msgs)
    assert "engine;dur=" in r.headers["server-timing"]


def fake_llm_url(engine) -> str:
    return engine.app.state.settings.llm_url


def test_multi_turn_history_and_joined_query(engine, fake_llm):
    # A fake index: the test checks the query the index received, which only the fake's call log shows.
    base = engine(registry=default_registry())
    msgs = [SYSTEM, {"role": "user", "content": "What is KAITO?"},
            {"role": "assistant", "content": "KAITO is a Kubernetes operator."},
            {"role": "user", "content": "Tell me more about it."},
            {"role": "user", "content": "Specifically about GPU support."}]
    assert post(base, {"index_name": "docs", "messages": msgs}).status_code == 200
    query = "Tell me more about it.\n\nSpecifically about GPU support."
    assert fake_llm.last_chat()["messages"] == [
        {"role": "system", "content": KAITO_CONTEXT + "You are a helpful assistant."},
        {"role": "user", "content": "What is KAITO?"},
        {"role": "assistant", "content": "KAITO is a Kubernetes operator."},
        {"role": "user", "content": "Tell me more about it.\n\nSpecifically about GPU support."}]
    assert engine.app.state.chat.registry.calls[-1]["query"] == query


def test_budget_skips_what_does_not_fit_and_lowers_max_tokens(engine, fake_llm):
    big = "word " * 500
    registry = FakeRegistry({"docs": [node("a", "alpha beta gamma", 0.9), node("big", big, 0.8),
                                      node("c", "delta epsilon", 0.7)]})
    fake_llm.max_model_len = 1000
    base = engine(registry=registry)
    msgs = [{"role": "user", "content": "Explain KAITO"}]
    r = post(base, {"index_name": "docs", "messages": msgs, "max_tokens": 5000, "context_token_ratio": 0.5})
    assert r.status_code == 200, r.text
    # The fake's tokenizer: "Explain KAITO" is 2 tokens; the prompt 2 + 4 (message) + 3 (generation) = 9.
    # Budget (the seed's): min(1000 - 9, 1000 - 2 - 150 reserved) * 0.5 = 424, so the 500-token chunk
    # cannot fit and the smaller, less relevant one after it still does: 3 + 2 = 5 context tokens.
    rag = r.json()["rag"]
    assert (rag["prompt_tokens"], rag["context_budget"], rag["selected"], rag["context_tokens"]) == (9, 424, 2, 5)
    assert rag["max_tokens_requested"] == 5000
    sent = fake_llm.last_chat()
    assert sent["max_tokens"] == rag["max_tokens"] == 836  # 1000 - 9 prompt - 150 reserved - 5 context
    assert sent["messages"] == [
        {"role": "system", "content": "Use the context information below to assist the user.\n--------------------\n"
                                      "alpha beta gamma\n\ndelta epsilon\n--------------------\n"},
        {"role": "user", "content": "Explain KAITO"}]
    assert [s["doc_id"] for s in r.json()["source_nodes"]] == ["a", "c"]


def test_max_completion_tokens_is_handled_like_max_tokens(engine, fake_llm):
    fake_llm.max_model_len = 1000
    base = engine()
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "q"}], "max_completion_tokens": 50})
    assert r.status_code == 200
    assert fake_llm.last_chat()["max_completion_tokens"] == 50 and "max_tokens" not in fake_llm.last_chat()


def test_similarity_threshold(engine, fake_llm):
    # A fake index: which chunks clear 0.8 depends on exact scores, fixed here.
    base = engine(registry=default_registry(), similarity_threshold=0.8)
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert [s["doc_id"] for s in r.json()["source_nodes"]] == ["kaito-1", "kaito-2"]


@EVERY_STORE
def test_no_context_survives_passes_through(engine, fake_llm):
    base = engine(similarity_threshold=0.99)
    body = {"index_name": "docs", "model": "fake-llm", "messages": [{"role": "user", "content": "hi"}], "seed": 3}
    r = post(base, body)
    assert r.status_code == 200
    assert fake_llm.last_chat() == {"model": "fake-llm", "messages": body["messages"], "seed": 3}
    out = r.json()
    assert out["source_nodes"] is None and out["rag"]["applied"] is False and out["rag"]["reason"] == "no_context"


def test_top_k_grows_with_window(engine, fake_llm):
    fake_llm.max_model_len = 128_000
    # A fake index: the top_k the index was asked for is read from its call log.
    base = engine(registry=default_registry(), node_token_approximation=100)
    post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "q"}]})
    # the seed's max(100, free tokens / node_token_approximation): (128000 - 8 prompt tokens) // 100
    assert engine.app.state.chat.registry.calls[-1]["top_k"] == 1279


def test_openai_fields_reach_the_llm_unchanged(engine, fake_llm):
    base = engine()
    extra = {"temperature": 0.2, "top_p": 0.9, "stop": ["\n\n"], "seed": 42, "presence_penalty": 0.1,
             "response_format": {"type": "json_object"}, "logprobs": True, "top_logprobs": 2, "user": "u1",
             "some_future_field": {"x": [1, 2]}}
    post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "q"}], **extra})
    sent = fake_llm.last_chat()
    assert {k: sent[k] for k in extra} == extra
    assert "index_name" not in sent and "context_token_ratio" not in sent


def test_n_greater_than_one_is_passed_through(engine, fake_llm):
    base = engine()
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "q"}], "n": 2})
    assert fake_llm.last_chat()["n"] == 2 and len(r.json()["choices"]) == 2


@EVERY_STORE
def test_model_alias_routes_to_rag(engine, fake_llm):
    base = engine()
    r = post(base, {"model": "rag:docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert r.status_code == 200 and r.json()["rag"]["applied"] is True
    assert fake_llm.last_chat()["model"] == "fake-llm"
    models = httpx.get(f"{base}/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["fake-llm", "rag:docs"]
    assert models[0]["max_model_len"] == 4096


def test_token_counts_fall_back_to_estimate(engine, fake_llm):
    fake_llm.tokenize_enabled = False
    base = engine()
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert r.status_code == 200 and r.json()["rag"]["token_counter"] == "estimate"


@EVERY_STORE
def test_retrieval_filters_are_passed_to_the_index_not_the_llm(engine, fake_llm):
    base = engine()
    flt = {"type": "eq", "key": "source", "value": "kaito-2"}
    for extra in ({"filters": flt}, {"metadata_filter": {"source": "kaito-2"}}):
        r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}], **extra})
        assert [s["doc_id"] for s in r.json()["source_nodes"]] == ["kaito-2"]  # the real index applied it
        assert "filters" not in fake_llm.last_chat() and "metadata_filter" not in fake_llm.last_chat()


def test_kaito_style_full_llm_url_is_accepted(engine, fake_llm, llm_url):
    base = engine(llm_url=llm_url + "/chat/completions")
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 200 and r.json()["rag"]["token_counter"] == "vllm"


def test_context_is_filled_in_score_order(engine, fake_llm):
    """Issue 11 item 1, the seed's sort before the greedy fill. A fake index: the test needs a retrieval
    order (the hybrid index's fused rank) that disagrees with the scores, which a real index gives only by
    chance."""
    texts = ["Keyword match that BM25 ranked first.", "The closest chunk by similarity.", "A middling chunk."]
    registry = FakeRegistry({"docs": [node("bm25", texts[0], 0.41), node("close", texts[1], 0.93),
                                      node("mid", texts[2], 0.66)]})
    base = engine(registry=registry)
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "q"}]})
    assert [n["doc_id"] for n in r.json()["source_nodes"]] == ["close", "mid", "bm25"]
    system = fake_llm.last_chat()["messages"][0]["content"]
    assert system.index(texts[1]) < system.index(texts[2]) < system.index(texts[0])


def test_ttft_metrics_observed_with_their_labels(engine, fake_llm, llm_url):
    """The labels the engine passes are the labels the metrics declare: mode and the answering endpoint."""
    from ragengine.metrics import REGISTRY

    def count(name: str, labels: dict) -> float:
        return REGISTRY.get_sample_value(f"{name}_count", labels) or 0

    before, llm_before = count("rag_ttft_seconds", {"mode": "rag"}), count("llm_ttft_seconds", {"endpoint": llm_url})
    passthrough = count("rag_ttft_seconds", {"mode": "passthrough"})
    base = engine()
    post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "q"}]})
    with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=30,
                      json={"index_name": "docs", "stream": True, "messages": [{"role": "user", "content": "q"}]}) as r:
        r.read()
    post(base, {"messages": [{"role": "user", "content": "q"}]})
    assert count("rag_ttft_seconds", {"mode": "rag"}) == before + 2
    assert count("rag_ttft_seconds", {"mode": "passthrough"}) == passthrough + 1
    assert count("llm_ttft_seconds", {"endpoint": llm_url}) == llm_before + 3

