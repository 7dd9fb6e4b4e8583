"""The engine driven by the official openai SDK: plain, streaming, errors as the SDK's exception classes."""

from __future__ import annotations

import openai
import pytest

from tests.chat.conftest import DOCS
from tests.support.stores import EVERY_STORE, ON_FAISS

# The LLM, the budget and validation do not depend on the store: FAISS only, except where marked.
pytestmark = ON_FAISS

Q = [{"role": "user", "content": "What is KAITO?"}]


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=30)


@EVERY_STORE
def test_sdk_rag_plain(engine, fake_llm):
    c = client(engine())
    out = c.chat.completions.create(model="fake-llm", messages=Q, extra_body={"index_name": "docs"}, temperature=0)
    assert out.id.startswith("chatcmpl-") and out.choices[0].message.content == "Echo : What is KAITO ?"
    assert out.usage.total_tokens > 0 and out.choices[0].finish_reason == "stop"
    extra = out.model_extra
    assert {s["doc_id"] for s in extra["source_nodes"]} == {d[0] for d in DOCS}  # the real index, score order
    assert [s["score"] for s in extra["source_nodes"]] == sorted((s["score"] for s in extra["source_nodes"]),
                                                                 reverse=True)
    assert extra["generation_method"] == "llm"
    assert fake_llm.last_chat()["temperature"] == 0


@EVERY_STORE
def test_sdk_rag_stream(engine, fake_llm):
    c = client(engine())
    stream = c.chat.completions.create(model="fake-llm", messages=Q, stream=True, extra_body={"index_name": "docs"})
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "Echo : What is KAITO ?"
    assert chunks[-1].model_extra["source_nodes"][0]["doc_id"] == "kaito-1"


@EVERY_STORE
def test_sdk_model_alias_and_models(engine, fake_llm):
    c = client(engine())
    assert [m.id for m in c.models.list()] == ["fake-llm", "rag:docs"]
    out = c.chat.completions.create(model="rag:docs", messages=Q)
    assert out.model_extra["rag"]["applied"] is True


@pytest.mark.parametrize("status, exc", [
    (400, openai.BadRequestError), (401, openai.AuthenticationError), (404, openai.NotFoundError),
    (429, openai.RateLimitError),
])
def test_sdk_upstream_errors(engine, fake_llm, status, exc):
    c = client(engine(extractive_fallback=False))  # RAG requests would otherwise be answered extractively
    fake_llm.fail_next.append((status, "said upstream"))
    with pytest.raises(exc) as info:
        c.chat.completions.create(model="fake-llm", messages=Q, extra_body={"index_name": "docs"})
    assert info.value.status_code == status and "said upstream" in info.value.message


def test_sdk_engine_errors(engine, dead_url):
    c = client(engine())
    with pytest.raises(openai.NotFoundError, match=r"No such index: 'nope' exists\."):
        c.chat.completions.create(model="m", messages=Q, extra_body={"index_name": "nope"})
    with pytest.raises(openai.BadRequestError, match="There must be a user prompt"):
        c.chat.completions.create(model="m", messages=[*Q, {"role": "assistant", "content": "a"}],
                                  extra_body={"index_name": "docs"})
    with pytest.raises(openai.BadRequestError, match="context_token_ratio"):
        c.chat.completions.create(model="m", messages=Q, extra_body={"index_name": "docs", "context_token_ratio": 0.1})
    c = client(engine(llm_url=dead_url))
    with pytest.raises(openai.InternalServerError) as info:  # 502
        c.chat.completions.create(model="m", messages=Q)
    assert info.value.status_code == 502
