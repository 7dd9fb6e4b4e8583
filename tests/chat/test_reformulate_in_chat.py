"""`reformulate: true` in /v1/chat/completions rewrites the retrieval query, not what the LLM answers."""

from __future__ import annotations

import httpx

from tests.chat.conftest import default_registry
from tests.support.stores import ON_FAISS

# Reformulation is the LLM's side: the store-dependent retrieval runs on every store in test_http.py.
pytestmark = ON_FAISS

HISTORY = [
    {"role": "user", "content": "What does KAITO deploy?"},
    {"role": "assistant", "content": "It deploys AI models on Kubernetes."},
]
FOLLOW_UP = {"role": "user", "content": "Which GPUs does it use?"}


def _reply(body: dict) -> str:
    # The reformulator's request is recognisable by its system prompt; answer it with a standalone question.
    first = body["messages"][0]
    if first["role"] == "system" and "standalone" in str(first.get("content", "")).lower():
        return "Which GPU nodes does KAITO use for inference"
    return "an answer"


def _chat(base: str, **extra) -> httpx.Response:
    body = {"index_name": "docs", "messages": [*HISTORY, FOLLOW_UP], **extra}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)


def test_reformulated_query_drives_retrieval(engine, fake_llm):
    fake_llm.reply = _reply
    registry = default_registry()  # a fake index: the query it received is read from its call log
    base = engine(registry=registry)
    r = _chat(base, reformulate=True)
    assert r.status_code == 200, r.text
    rag = r.json()["rag"]
    assert rag["query_used"] == "Which GPU nodes does KAITO use for inference"
    assert rag["reformulation"]["reformulated"] is True
    assert registry.calls[-1]["query"] == "Which GPU nodes does KAITO use for inference"
    # Two LLM calls: the rewrite, then the answer, which gets the standalone question (the seed) and no
    # engine-only field.
    sent = fake_llm.chat_requests()
    assert len(sent) == 2
    assert "reformulate" not in sent[-1]
    assert sent[-1]["messages"][-1] == {"role": "user", "content": "Which GPU nodes does KAITO use for inference"}
    assert sent[-1]["messages"][1:3] == HISTORY


def test_the_rewrite_can_stay_retrieval_only(engine, fake_llm):
    fake_llm.reply = _reply
    base = engine(reformulated_query_to_llm=False)
    r = _chat(base, reformulate=True)
    assert r.json()["rag"]["query_used"] == "Which GPU nodes does KAITO use for inference"
    assert fake_llm.chat_requests()[-1]["messages"][-1] == FOLLOW_UP


def test_without_opt_in_the_user_words_are_the_query(engine, fake_llm):
    fake_llm.reply = _reply
    registry = default_registry()  # a fake index: the query it received is read from its call log
    base = engine(registry=registry)
    r = _chat(base)
    assert r.status_code == 200, r.text
    assert r.json()["rag"]["query_used"] == "Which GPUs does it use?"
    assert "reformulation" not in r.json()["rag"]
    assert len(fake_llm.chat_requests()) == 1


def test_engine_setting_turns_it_on_and_request_can_turn_it_off(engine, fake_llm):
    fake_llm.reply = _reply
    base = engine(reformulate=True)
    assert _chat(base).json()["rag"]["reformulation"]["reformulated"] is True
    off = _chat(base, reformulate=False).json()["rag"]
    assert off["query_used"] == "Which GPUs does it use?" and "reformulation" not in off


def test_chat_reformulations_are_counted(engine, fake_llm):
    """The metric is recorded in the rag layer, so chat completions count like session messages do."""
    from ragengine.metrics import REGISTRY

    def value(name: str, labels: dict | None = None) -> float:
        return REGISTRY.get_sample_value(name, labels or {}) or 0.0

    fake_llm.reply = _reply
    base = engine()
    before = value("ragengine_reformulations_total", {"outcome": "rewritten"})
    timed = value("ragengine_reformulate_seconds_count")
    assert _chat(base, reformulate=True).status_code == 200
    assert value("ragengine_reformulations_total", {"outcome": "rewritten"}) == before + 1
    assert value("ragengine_reformulate_seconds_count") == timed + 1
