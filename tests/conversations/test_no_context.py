"""Session answers when retrieval ran and nothing passed the similarity threshold: the ``no_context`` setting.

A session whose knowledge index 'kb' holds one document about soup; "How tall is Mount Everest?" matches
nothing in it (the packaged model scores it far under the default threshold 0.3), a soup question does.
"""

from __future__ import annotations

import contextlib

import httpx
import pytest

from ragengine.app import create_app
from ragengine.protocol.sse import parse_sse
from ragengine.settings import EngineSettings
from tests.conversations.scripted_llm import grounded_reply
from tests.support.embedding import borrowed
from tests.support.server import serve_app

REFUSAL = "I could not find anything in the documents that answers this question."
DISCLAIMER = "Note: no document matched this question, so this answer is not based on the documents."
EVEREST = "How tall is Mount Everest?"
ANSWER = "Mount Everest is 8849 metres tall."
SOUP = "The Mushroom Soup takes 25 minutes to cook. It needs cream and thyme."


@pytest.fixture(scope="module")
def engine_with(llms, embedder, tmp_path_factory):
    """``engine_with(policy)``: an engine on the scripted LLM with ``no_context=policy`` and index 'kb'."""
    primary, _ = llms
    running: dict[str, httpx.Client] = {}
    with contextlib.ExitStack() as stack:
        def get(policy: str) -> httpx.Client:
            if policy not in running:
                app = create_app(EngineSettings(data_dir=tmp_path_factory.mktemp(f"nc-{policy}"), llm_url=primary.base,
                                                llm_retries=0, no_context=policy))
                app.state.embedder = stack.enter_context(borrowed(embedder))
                http = running[policy] = stack.enter_context(httpx.Client(base_url=stack.enter_context(serve_app(app)),
                                                                          timeout=120))
                r = http.post("/index", json={"index_name": "kb", "documents": [{"text": SOUP}]})
                assert r.status_code == 200, r.text
            return running[policy]

        yield get


@pytest.fixture(autouse=True)
def everest_reply(llms):
    """The LLM answers the Everest question from its own knowledge, the rest from the context (the default)."""
    def reply(body: dict) -> str:
        return ANSWER if body["messages"][-1]["content"] == EVEREST else grounded_reply(body)

    llms[0].reply = reply  # the conftest puts the default back after the test


def ask(http: httpx.Client, content: str, **body) -> dict:
    sid = http.post("/v1/sessions", json={"index_name": "kb"}).json()["id"]
    r = http.post(f"/v1/sessions/{sid}/messages", json={"content": content, **body})
    assert r.status_code == 200, r.text
    if body.get("stream"):
        events = parse_sse(r.text)
        done = events[-2]
        text = "".join(e["content"] for e in events if isinstance(e, dict) and e["type"] == "text_chunk")
        assert done["assistant_message"]["content"] == text  # what was streamed is what was stored
        return done
    return r.json()


def test_answer_keeps_the_llms_answer_and_records_the_outcome(engine_with, llms):
    out = ask(engine_with("answer"), EVEREST)
    assert out["assistant_message"]["content"] == ANSWER
    meta = out["assistant_message"]["metadata"]
    assert meta["no_context"] == "answer" and meta["sources"] == []


def test_refuse_answers_the_fixed_message_without_asking_the_llm(engine_with, llms):
    http = engine_with("refuse")
    for stream in (False, True):
        out = ask(http, EVEREST, stream=stream)
        assert out["assistant_message"]["content"] == REFUSAL
        meta = out["assistant_message"]["metadata"]
        assert (meta["generation_method"], meta["no_context"]) == ("no_context_refusal", "refuse")
    assert llms[0].chats() == []
    grounded = ask(http, "How long does the mushroom soup take?")
    assert grounded["assistant_message"]["content"] == "The Mushroom Soup takes 25 minutes to cook."
    assert "no_context" not in grounded["assistant_message"]["metadata"]


def test_disclaim_appends_the_disclaimer(engine_with):
    http = engine_with("disclaim")
    for stream in (False, True):
        out = ask(http, EVEREST, stream=stream)
        assert out["assistant_message"]["content"] == f"{ANSWER}\n\n{DISCLAIMER}"
        assert out["assistant_message"]["metadata"]["no_context"] == "disclaim"
    grounded = ask(http, "How long does the mushroom soup take?")
    assert grounded["assistant_message"]["content"] == "The Mushroom Soup takes 25 minutes to cook."
