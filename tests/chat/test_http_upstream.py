"""When the LLM fails: upstream errors kept or answered from the documents, the fallback chain, timeouts,
and the extractive answer when no LLM answers at all."""

from __future__ import annotations

import httpx
import pytest

from tests.chat.chat_client import error_of, post, sse_events
from tests.support.stores import EVERY_STORE, ON_FAISS

# The LLM, the budget and validation do not depend on the store: FAISS only, except where marked.
pytestmark = ON_FAISS


@pytest.mark.parametrize("status", [400, 401, 404, 429])
def test_upstream_errors_keep_status_and_message_in_pass_through(engine, fake_llm, status):
    base = engine()
    fake_llm.fail_next.append((status, f"upstream says {status}"))
    body = {"messages": [{"role": "user", "content": "q"}]}
    assert error_of(post(base, body)) == (status, f"upstream says {status}")
    fake_llm.fail_next.append((status, f"upstream says {status}"))
    r = post(base, {**body, "stream": True})
    assert error_of(r) == (status, f"upstream says {status}")


@pytest.mark.parametrize("status", [400, 401, 429])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_4xx_on_rag_falls_back_to_the_extractive_answer(engine, fake_llm, status, stream):
    """Issue 11 item 8: a refused request (bad key, rate limit, context overflow) is answered from the
    documents like an unreachable LLM, with the reason; the switch gives the error instead."""
    base = engine()
    body = {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}], "stream": stream}
    fake_llm.fail_next.append((status, f"upstream says {status}"))
    r = post(base, body)
    assert r.status_code == 200
    last = sse_events(r)[-2] if stream else r.json()
    assert last["generation_method"] == "extractive_fallback"
    assert last["fallback_reason"] == f"The LLM refused the request (HTTP {status}): upstream says {status}"
    strict = engine(extractive_fallback=False)
    fake_llm.fail_next.append((status, f"upstream says {status}"))
    assert error_of(post(strict, body)) == (status, f"upstream says {status}")


def test_upstream_4xx_moves_along_the_chain(engine, fake_llm, llm_url):
    base = engine(llm_fallback_urls=[llm_url])  # same server twice: the first answer is a 429
    fake_llm.fail_next.append((429, "rate limited"))
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert r.status_code == 200 and r.json()["generation_method"] == "llm" and len(fake_llm.chat_requests()) == 2


def test_upstream_context_overflow_keeps_its_400(engine, fake_llm):
    base = engine()
    r = post(base, {"messages": [{"role": "user", "content": "q"}], "max_tokens": 10**6})  # pass-through: as is
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]


def test_unreachable_llm(engine, dead_url):
    base = engine(llm_url=dead_url)
    r = post(base, {"messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 502 and "cannot connect" in r.json()["error"]["message"]
    assert dead_url in r.json()["error"]["message"]


def test_timeout_is_504(engine, fake_llm):
    fake_llm.first_token_delay_s = 2.0
    base = engine(llm_timeout_s=0.3)
    r = post(base, {"messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 504 and "timed out" in r.json()["error"]["message"]


def test_fallback_chain(engine, fake_llm, dead_url, llm_url):
    base = engine(llm_url=dead_url, llm_fallback_urls=[llm_url])
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert r.status_code == 200 and r.json()["rag"]["endpoint"] == llm_url
    assert r.json()["generation_method"] == "llm"


def test_fallback_on_5xx(engine, fake_llm, llm_url):
    base = engine(llm_fallback_urls=[llm_url])  # same server twice: the first answer is a 503
    fake_llm.fail_next.append((503, "overloaded"))
    r = post(base, {"messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 200 and len(fake_llm.chat_requests()) == 2


def test_all_5xx_is_502_with_message(engine, fake_llm):
    base = engine()
    fake_llm.fail_next.append((500, "boom"))
    r = post(base, {"messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 502 and "HTTP 500: boom" in r.json()["error"]["message"]


def test_extractive_when_llm_unreachable(engine, dead_url):
    base = engine(llm_url=dead_url)
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert r.status_code == 200
    body = r.json()
    assert body["generation_method"] == "extractive_fallback"
    assert "cannot connect" in body["fallback_reason"]
    assert "KAITO is a Kubernetes operator" in body["choices"][0]["message"]["content"]
    assert body["source_nodes"] and body["id"].startswith("chatcmpl-")


@EVERY_STORE
def test_extractive_when_no_llm_configured(engine):
    base = engine(llm_url=None)
    r = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "Which library does similarity search?"}]})
    body = r.json()
    assert body["generation_method"] == "extractive_fallback" and "No LLM is configured" in body["fallback_reason"]
    assert body["choices"][0]["message"]["content"].startswith("FAISS is a library")
    r = post(base, {"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503 and "No LLM is configured" in r.json()["error"]["message"]


@EVERY_STORE
def test_extractive_streamed(engine):
    base = engine(llm_url=None)
    with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=30,
                      json={"index_name": "docs", "stream": True,
                            "messages": [{"role": "user", "content": "What is KAITO?"}]}) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert final["generation_method"] == "extractive_fallback" and final["source_nodes"]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-2] if e["choices"])
    assert text.startswith("KAITO is a Kubernetes operator")

