"""Retrieval asked for, nothing above the similarity threshold: the ``no_context`` setting (answer, refuse,
disclaim) on JSON and streamed answers, and the ``X-RAG-Outcome`` header a client reads without parsing ``rag``.

The real 'docs' index (KAITO, FAISS, a cafeteria) with the default threshold 0.3: a question about Mount Everest
matches none of it. The fake LLM answers ``ANSWER`` to every question.
"""

from __future__ import annotations

import httpx
import pytest

from tests.chat.chat_client import post, sse_events
from tests.support.stores import ON_FAISS

pytestmark = ON_FAISS

EVEREST = [{"role": "user", "content": "How tall is Mount Everest?"}]
ANSWER = "Mount Everest is 8849 metres tall"  # no punctuation: the fake re-joins its tokens with spaces
REFUSAL = "I could not find anything in the documents that answers this question."
DISCLAIMER = "Note: no document matched this question, so this answer is not based on the documents."


def stream(base: str, body: dict) -> tuple[httpx.Headers, list]:
    with httpx.stream("POST", f"{base}/v1/chat/completions", json={**body, "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        return r.headers, sse_events(r)


def streamed_text(events: list) -> str:
    return "".join((c["choices"][0]["delta"].get("content") or "") for c in events[:-1] if c.get("choices"))


def test_outcome_header_names_applied_no_context_and_bypass(engine):
    base = engine(similarity_threshold=0.3)
    grounded = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert grounded.headers["x-rag-outcome"] == "applied" and grounded.json()["rag"]["applied"] is True
    ungrounded = post(base, {"index_name": "docs", "messages": EVEREST})
    assert ungrounded.headers["x-rag-outcome"] == "no_context"
    assert ungrounded.json()["rag"]["reason"] == "no_context"
    plain = post(base, {"messages": EVEREST})
    assert plain.headers["x-rag-outcome"] == "no_index_name"
    headers, _ = stream(base, {"index_name": "docs", "messages": EVEREST})
    assert headers["x-rag-outcome"] == "no_context"


@pytest.fixture(autouse=True)
def fixed_reply(fake_llm):
    fake_llm.reply = ANSWER


def test_answer_is_the_default_and_the_llm_answers_as_asked(engine, fake_llm):
    base = engine(similarity_threshold=0.3)
    body = post(base, {"index_name": "docs", "messages": EVEREST}).json()
    assert body["choices"][0]["message"]["content"] == ANSWER
    assert body["rag"]["no_context"] == "answer" and body["generation_method"] == "llm"
    assert fake_llm.last_chat()["messages"] == EVEREST  # passed through as sent


def test_refuse_answers_the_fixed_message_without_asking_the_llm(engine, fake_llm):
    base = engine(similarity_threshold=0.3, no_context="refuse")
    r = post(base, {"index_name": "docs", "messages": EVEREST, "n": 2})
    body = r.json()
    assert r.headers["x-rag-outcome"] == "no_context"
    assert [c["message"]["content"] for c in body["choices"]] == [REFUSAL, REFUSAL]
    assert body["generation_method"] == "no_context_refusal" and body["source_nodes"] is None
    assert (body["rag"]["reason"], body["rag"]["no_context"]) == ("no_context", "refuse")
    headers, events = stream(base, {"index_name": "docs", "messages": EVEREST})
    assert streamed_text(events) == REFUSAL and events[-1] == "[DONE]"
    assert events[-2]["generation_method"] == "no_context_refusal" and headers["x-rag-outcome"] == "no_context"
    assert fake_llm.chat_requests() == []
    # A question the index answers is not refused.
    grounded = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert grounded.json()["choices"][0]["message"]["content"] == ANSWER


def test_disclaim_appends_the_disclaimer_to_json_and_streamed_answers(engine, fake_llm):
    base = engine(similarity_threshold=0.3, no_context="disclaim")
    body = post(base, {"index_name": "docs", "messages": EVEREST}).json()
    assert body["choices"][0]["message"]["content"] == f"{ANSWER}\n\n{DISCLAIMER}"
    assert body["rag"]["no_context"] == "disclaim"
    _, events = stream(base, {"index_name": "docs", "messages": EVEREST})
    assert streamed_text(events) == f"{ANSWER}\n\n{DISCLAIMER}"
    finishing = [i for i, c in enumerate(events[:-1]) if c.get("choices") and c["choices"][0].get("finish_reason")]
    disclaimer_at = next(i for i, c in enumerate(events[:-1])
                         if c.get("choices") and DISCLAIMER in (c["choices"][0]["delta"].get("content") or ""))
    assert finishing == [disclaimer_at + 1]  # the disclaimer comes before finish_reason, which stays last
    grounded = post(base, {"index_name": "docs", "messages": [{"role": "user", "content": "What is KAITO?"}]})
    assert grounded.json()["choices"][0]["message"]["content"] == ANSWER


def test_disclaim_without_an_llm_disclaims_the_extractive_answer(engine):
    base = engine(similarity_threshold=0.3, no_context="disclaim", llm_url=None)
    body = post(base, {"index_name": "docs", "messages": EVEREST}).json()
    assert body["generation_method"] == "extractive_fallback"
    assert body["choices"][0]["message"]["content"].endswith(f"\n\n{DISCLAIMER}")


@pytest.mark.parametrize("value", ["maybe", ""])
def test_an_unknown_setting_is_refused(value):
    from pydantic import ValidationError

    from ragengine.settings import EngineSettings

    with pytest.raises(ValidationError, match="no_context"):
        EngineSettings(no_context=value)


async def test_disclaimer_goes_between_the_last_text_and_the_finish_when_one_chunk_has_both():
    from ragengine.rag.no_context import disclaim_chunks

    async def upstream():
        yield {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Mount"}, "finish_reason": None}]}
        yield {"id": "c", "choices": [{"index": 0, "delta": {"content": " Everest"}, "finish_reason": "stop"}],
               "usage": {"completion_tokens": 2}}
        yield {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "finish_reason": None}]}

    out = [c async for c in disclaim_chunks(upstream())]
    assert [c["choices"] for c in out] == [
        [{"index": 0, "delta": {"role": "assistant", "content": "Mount"}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": " Everest"}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": f"\n\n{DISCLAIMER}"}, "finish_reason": None}],
        [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "finish_reason": None}],
    ]
    assert [("usage" in c) for c in out] == [False, False, False, True, False]  # usage once, on the last
