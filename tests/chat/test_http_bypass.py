"""Requests the chat endpoint passes to the LLM untouched: no index, tools, non-user roles, non-text content."""

from __future__ import annotations

import pytest

from tests.chat.chat_client import post
from tests.chat.conftest import default_registry
from tests.support.stores import ON_FAISS

# The LLM, the budget and validation do not depend on the store: FAISS only, except where marked.
pytestmark = ON_FAISS


def test_no_index_passes_body_as_is(engine, fake_llm):
    base = engine()
    body = {"model": "fake-llm", "messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "x_extra": 1}
    r = post(base, body)
    assert r.status_code == 200
    assert fake_llm.last_chat() == body
    assert r.json()["source_nodes"] is None and r.json()["rag"]["reason"] == "no_index_name"


def test_no_index_without_model_gets_the_served_model(engine, fake_llm):
    base = engine()
    post(base, {"messages": [{"role": "user", "content": "Hello"}]})
    assert fake_llm.last_chat()["model"] == "fake-llm"


@pytest.mark.parametrize("extra, reason", [
    ({"tools": [{"type": "function", "function": {"name": "get_weather"}}]}, "tools_or_functions"),
    ({"messages": [{"role": "tool", "content": "75F", "tool_call_id": "1"}, {"role": "user", "content": "ok"}]},
     "unsupported_role:tool"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "what?"},
                                                {"type": "image_url", "image_url": {"url": "data:,"}}]}]},
     "non_text_content"),
])
def test_bypass_rules_pass_through(engine, fake_llm, extra, reason):
    # A fake index: "never searched" is read from its call log.
    base = engine(registry=default_registry())
    body = {"model": "fake-llm", "index_name": "docs", "messages": [{"role": "user", "content": "q"}], **extra}
    r = post(base, body)
    assert r.status_code == 200, r.text
    expected = {k: v for k, v in body.items() if k != "index_name"}
    assert fake_llm.last_chat() == expected
    assert r.json()["rag"]["reason"] == reason and engine.app.state.chat.registry.calls == []

