"""Streaming: framing (pure), RAG streams forwarded as the LLM emits them, disconnects, errors after the 200."""

from __future__ import annotations

import json
import time

import httpx

from ragengine.chat.stream import error_event, relay, text_pieces
from ragengine.errors import UpstreamError
from ragengine.protocol.sse import DONE, frame
from tests.chat.chat_client import sse_events
from tests.chat.conftest import DOCS
from tests.chat.test_http_rag import REAL_CONTEXT, REAL_ORDER
from tests.support.stores import EVERY_STORE, ON_FAISS

# The LLM, the budget and validation do not depend on the store: FAISS only, except where marked.
pytestmark = ON_FAISS

URL = "/v1/chat/completions"
Q = [{"role": "user", "content": "What is KAITO?"}]


# --- pure framing -------------------------------------------------------------------------------
def test_sse_framing():
    assert frame({"a": "é"}) == 'data: {"a":"é"}\n\n'
    event = json.loads(error_event(UpstreamError("nope", status_code=429))[6:])
    assert event == {"error": {"message": "nope", "type": "upstream_error", "code": 429, "param": None}}
    assert "".join(text_pieces("one two three four five six seven")) == "one two three four five six seven"


async def test_relay_rewrites_ids_appends_final_and_done():
    async def upstream():
        yield {"id": "x", "choices": [{"index": 0, "delta": {"content": "a"}}]}
        yield {"id": "y", "choices": [{"index": 0, "delta": {"content": "b"}}]}

    out = [e async for e in relay(upstream(), completion_id="chatcmpl-1", final=lambda: {"source_nodes": []})]
    assert [json.loads(e[6:])["id"] for e in out[:2]] == ["chatcmpl-1", "chatcmpl-1"]
    assert out[2] == frame({"source_nodes": [], "id": "chatcmpl-1"}) and out[3] == DONE


async def test_relay_error_after_start_is_one_event_then_done():
    async def upstream():
        yield {"id": "x", "choices": []}
        raise UpstreamError("LLM stream failed: boom")

    out = [e async for e in relay(upstream(), completion_id=None)]
    assert json.loads(out[1][6:])["error"]["message"] == "LLM stream failed: boom" and out[2] == DONE


# --- over HTTP ----------------------------------------------------------------------------------
@EVERY_STORE
def test_rag_stream(engine, fake_llm):
    base = engine()
    with httpx.stream("POST", base + URL, json={"index_name": "docs", "stream": True, "messages": Q,
                                                "stream_options": {"include_usage": True}}, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    final, usage, chunks = events[-2], events[-3], events[:-3]
    assert {e["id"] for e in events[:-1]} == {final["id"]} and final["id"].startswith("chatcmpl-")
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Echo : What is KAITO ?"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6
    assert final["choices"] == [] and {s["doc_id"] for s in final["source_nodes"]} == {d[0] for d in DOCS}
    assert final["generation_method"] == "llm" and final["rag"]["applied"] is True
    sent = fake_llm.last_chat()
    assert sent["stream"] is True
    assert [s["doc_id"] for s in final["source_nodes"]] == REAL_ORDER
    assert sent["messages"] == [{"role": "system", "content": REAL_CONTEXT}, {"role": "user", "content": "What is KAITO?"}]
    assert sent["stream_options"] == {"include_usage": True}


def test_tokens_are_forwarded_as_the_llm_emits_them(engine, fake_llm):
    """No buffering in the engine: the LLM sends two tokens and then holds the rest; the client gets
    those two while the LLM is still holding, and the rest once it is released."""
    fake_llm.stream_hold_after = 2
    base = engine()
    contents: list[str] = []
    with httpx.stream("POST", base + URL, json={"index_name": "docs", "stream": True, "messages": Q}, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content":"' in line:
                contents.append(json.loads(line[6:])["choices"][0]["delta"]["content"])
                if len(contents) == 3:  # the role chunk, then the two tokens sent before the hold
                    assert contents == ["", "Echo", " :"] and not fake_llm.stream_events  # still generating
                    fake_llm.stream_release.set()
    assert "".join(contents) == "Echo : What is KAITO ?"


def test_client_disconnect_cancels_upstream(engine, fake_llm):
    fake_llm.stream_hold_after = 3  # never released: only a cancelled upstream ends this stream
    base = engine()
    with httpx.stream("POST", base + URL, json={"index_name": "docs", "stream": True, "messages": Q}, timeout=30) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen += 1
            if seen >= 3:
                break
    deadline = time.time() + 5
    while not fake_llm.stream_events and time.time() < deadline:
        time.sleep(0.05)
    assert fake_llm.stream_events == ["disconnected"]


def test_passthrough_stream_is_relayed_verbatim(engine, fake_llm):
    base = engine()
    body = {"model": "fake-llm", "stream": True, "messages": [{"role": "user", "content": "Hello there"}]}
    with httpx.stream("POST", base + URL, json=body, timeout=30) as r:
        events = sse_events(r)
    assert fake_llm.last_chat() == body
    assert events[-1] == "[DONE]" and all(e["choices"] for e in events[:-1])  # no extra chunk without index_name
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == "Echo : Hello there"


def test_stream_error_after_start(engine, fake_llm):
    fake_llm.stream_error_after = 2
    base = engine()
    with httpx.stream("POST", base + URL, json={"index_name": "docs", "stream": True, "messages": Q}, timeout=30) as r:
        assert r.status_code == 200
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["message"] == "LLM stream failed: engine crashed mid-stream"
    assert events[-2]["error"]["code"] == 500


def test_stream_falls_back_to_extractive_when_unreachable(engine, dead_url):
    base = engine(llm_url=dead_url)
    with httpx.stream("POST", base + URL, json={"index_name": "docs", "stream": True, "messages": Q}, timeout=30) as r:
        events = sse_events(r)
    assert events[-2]["generation_method"] == "extractive_fallback" and "cannot connect" in events[-2]["fallback_reason"]


def test_bypassed_rag_stream_says_why_in_last_chunk(engine, fake_llm):
    base = engine()
    body = {"model": "fake-llm", "index_name": "docs", "stream": True, "messages": Q,
            "tools": [{"type": "function", "function": {"name": "f"}}]}
    with httpx.stream("POST", base + URL, json=body, timeout=30) as r:
        events = sse_events(r)
    assert fake_llm.last_chat() == {k: v for k, v in body.items() if k != "index_name"}
    final = events[-2]
    assert final["rag"]["reason"] == "tools_or_functions" and final["source_nodes"] is None
    assert final["id"] == events[0]["id"]  # the upstream's id, as for every other chunk
