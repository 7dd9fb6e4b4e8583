"""The engine outlives its LLM (issue 23): with an LLM URL nobody answers (vLLM restarting, downloading
its model, scaled to zero) the engine stays ready, /retrieve answers and chat falls back to extractive
answers, while /health and /ready say the LLM is unavailable and why. And tools mode against a vLLM
started without a tool parser (the test LLM answers its 400) answers through retrieval, says why, and
logs it once. Real uvicorn servers, the real embedding model, the vLLM-like test LLM."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.llm_server import FakeLLM, create_llm_app
from tests.support.server import refused_port, serve_app

DOCS = [{"text": "Barn owls hunt at night and eat mice and voles."},
        {"text": "Kiwis are flightless birds that live in New Zealand."}]


@pytest.fixture
def dead() -> Iterator[str]:
    with refused_port() as port:  # bound, never listening: refused for the whole test
        yield f"http://127.0.0.1:{port}/v1"


def test_the_engine_outlives_an_llm_that_does_not_answer(make_server, dead):
    with make_server(llm_url=dead, llm_model="qwen", llm_retries=0) as (base, _), httpx.Client(base_url=base) as http:
        ready = http.get("/ready")
        assert ready.status_code == 200, ready.text  # the kubelet keeps the engine in its Service
        assert ready.json()["llm"]["available"] is False and "unreachable" in ready.json()["llm"]["reason"]
        assert http.post("/index", json={"index_name": "birds", "documents": DOCS}).status_code == 200
        found = http.post("/retrieve", json={"index_name": "birds", "query": "What do owls eat?"})
        assert found.status_code == 200 and "owls" in found.json()["results"][0]["text"]
        chat = http.post("/v1/chat/completions", json={
            "index_name": "birds", "model": "qwen", "messages": [{"role": "user", "content": "What do owls eat?"}]})
        assert chat.status_code == 200, chat.text
        body = chat.json()
        assert body["generation_method"] == "extractive_fallback" and "mice and voles" in body["choices"][0]["message"]["content"]
        assert "unavailable" in body["fallback_reason"].lower()
        health = http.get("/health").json()
        assert health["status"] == "Healthy" and health["llm"]["available"] is False and health["llm"]["configured"]
        assert http.get("/ready").status_code == 200


def test_llm_reasons_stay_out_of_open_endpoints_when_auth_is_on(make_server, dead):
    with make_server(llm_url=dead, api_key="k") as (base, _):
        llm = httpx.get(f"{base}/ready").json()["llm"]
        assert llm["available"] is False and "reason" not in llm  # it names internal URLs
        assert "reason" not in httpx.get(f"{base}/health").json()["llm"]


def upload(http: httpx.Client, name: str, text: str) -> str:
    r = http.post("/v1/files", files={"file": (name, text.encode(), "text/plain")})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 120
    while (info := http.get(f"/v1/files/{r.json()['file_id']}").json())["ingestion_status"] not in ("completed", "failed"):
        assert time.monotonic() < deadline, info
        time.sleep(0.05)
    assert info["ingestion_status"] == "completed", info
    return info["id"] if "id" in info else r.json()["file_id"]


def test_tools_mode_without_a_tool_parser_answers_with_retrieval_and_says_why(make_server, caplog):
    fake = FakeLLM(model="qwen", auto_tool_choice=False)  # vLLM without --enable-auto-tool-choice
    with serve_app(create_llm_app(fake)) as llm, \
            make_server(llm_url=f"{llm}/v1", llm_model="qwen", llm_retries=0) as (base, _), \
            httpx.Client(base_url=base, timeout=120) as http:
        fid = upload(http, "owls.txt", "Barn owls hunt at night. They eat mice and voles.")
        sid = http.post("/v1/sessions", json={"file_ids": [fid]}).json()["id"]
        caplog.set_level(logging.INFO, logger="ragengine")
        for question in ("What do barn owls eat?", "When do owls hunt?", "Do owls eat voles?"):
            r = http.post(f"/v1/sessions/{sid}/messages", json={"content": question, "mode": "tools"})
            assert r.status_code == 200, r.text
            meta = r.json()["assistant_message"]["metadata"]
            # an LLM answer from retrieved context, not the extractive fallback
            assert meta["generation_method"] == "llm", meta
            assert "--tool-call-parser" in meta["tools_unavailable"] and meta["sources"]
        with_tools = [b for b in fake.chat_requests() if b.get("tools")]
        assert len(with_tools) == 1  # refused once, not asked again on every turn
        context = fake.last_chat()["messages"][0]["content"]
        assert "mice and voles" in context and "tools" not in fake.last_chat()
        said = [r for r in caplog.records if "tool calls are unavailable" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.WARNING and "--tool-call-parser" in said[0].getMessage()
        llm_state = http.get("/health").json()["llm"]
        assert llm_state["tool_calls"] is False and "--enable-auto-tool-choice" in llm_state["tool_calls_reason"]


def test_tools_mode_with_a_tool_parser_sends_the_tool(make_server):
    fake = FakeLLM(model="qwen")  # started with a parser: tool_choice "auto" is accepted
    with serve_app(create_llm_app(fake)) as llm, \
            make_server(llm_url=f"{llm}/v1", llm_model="qwen", llm_retries=0) as (base, _), \
            httpx.Client(base_url=base, timeout=120) as http:
        fid = upload(http, "kiwi.txt", "Kiwis are flightless birds of New Zealand.")
        sid = http.post("/v1/sessions", json={"file_ids": [fid]}).json()["id"]
        meta = http.post(f"/v1/sessions/{sid}/messages", json={"content": "Where do kiwis live?", "mode": "tools"}
                         ).json()["assistant_message"]["metadata"]
        assert "tools_unavailable" not in meta and meta["generation_method"] == "llm_tools"
        assert fake.chat_requests()[0]["tools"][0]["function"]["name"] == "semantic_search"
        assert http.get("/health").json()["llm"]["tool_calls"] is True


def test_engine_streams_ask_for_usage(make_server):
    fake = FakeLLM(model="qwen")
    with serve_app(create_llm_app(fake)) as llm, \
            make_server(llm_url=f"{llm}/v1", llm_model="qwen") as (base, _), \
            httpx.Client(base_url=base, timeout=120) as http:
        sid = http.post("/v1/sessions", json={}).json()["id"]
        meta = http.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello there", "mode": "none"}
                         ).json()["assistant_message"]["metadata"]
        sent = fake.last_chat()
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
        assert meta["usage"]["completion_tokens"] > 0  # vLLM sends usage only when asked
