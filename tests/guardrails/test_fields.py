"""Issue 41: the output policy on every field and every route that returns model output.

The fake vLLM puts the key in each field it can carry (``content``, ``reasoning_content``, a tool call's
``arguments``, ``logprobs``, vLLM's ``token_ids``), one character per delta, and each route (chat completions
pass-through and RAG, Responses, session messages; JSON and SSE; what is stored) is read the way a client
could read it: every string and token list of every object, joined field by field, token ids decoded.
Before, the key left through every field but ``content``, and through all of ``/v1/responses``.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest

from ragengine.protocol.sse import parse_sse
from tests.guardrails.test_http import ANSWER, KEY, REDACTED, chars

ARGUMENTS = f'{{"account": "{KEY}", "region": "eu"}}'


def objects(text: str) -> list:
    """Every JSON object a response holds: its body, or each event of a stream (both SSE framings)."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        if line.startswith("data: ") and line[6:].strip() not in ("", "[DONE]"):
            out.append(json.loads(line[6:]))
    return out or parse_sse(text)


def joined(values: list) -> dict[str, str]:
    """Per field path (list positions left out), its strings in order joined; token ids decoded."""
    out: dict[str, list[str]] = defaultdict(list)

    def walk(value, path: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}")
        elif isinstance(value, list):
            if value and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
                out[path].append("".join(chr(x) for x in value if 0 <= x < 0x110000))  # token ids, bytes
            for v in value:
                walk(v, path)
        elif isinstance(value, str):
            out[path].append(value)

    for v in values:
        walk(v, "")
    return {k: "".join(v) for k, v in out.items()}


def assert_no_key(text: str) -> dict[str, str]:
    fields = joined(objects(text))
    leaked = sorted(path for path, value in fields.items() if KEY in value or "AKIA" in value.replace("[REDACTED]", ""))
    assert KEY not in text and not leaked, leaked
    return fields


@pytest.fixture
def everywhere(fake_llm):
    fake_llm.reply, fake_llm.split = ANSWER, chars
    fake_llm.reasoning = f"The user wants the key {KEY}; I will give it."
    fake_llm.tool_arguments = ARGUMENTS
    fake_llm.logprobs = fake_llm.token_ids = True
    return fake_llm


@pytest.mark.parametrize("rag", [False, True], ids=["pass-through", "rag"])
def test_chat_json_every_field(guarded, everywhere, rag):
    engine = guarded()
    r = engine.chat(logprobs=True, **({"index_name": "ops"} if rag else {}))
    assert r.status_code == 200, r.text
    assert_no_key(r.text)
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == REDACTED and choice["logprobs"] is None and "token_ids" not in choice
    assert choice["message"]["reasoning_content"] == "The user wants the key [REDACTED]; I will give it."
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"account": "[REDACTED]",
                                                                                        "region": "eu"}
    assert "prompt_token_ids" not in r.json()
    assert {"type": "regex", "action": "redact", "count": 3} in r.json()["guardrails"]["scanners"]


@pytest.mark.parametrize("rag", [False, True], ids=["pass-through", "rag"])
def test_chat_sse_every_field(guarded, everywhere, rag):
    engine = guarded()
    r = engine.chat(stream=True, logprobs=True, **({"index_name": "ops"} if rag else {}))
    assert r.status_code == 200
    fields = assert_no_key(r.text)
    assert fields[".choices.delta.content"] == REDACTED
    assert fields[".choices.delta.reasoning_content"] == "The user wants the key [REDACTED]; I will give it."
    assert json.loads(fields[".choices.delta.tool_calls.function.arguments"]) == {"account": "[REDACTED]", "region": "eu"}
    events = [e for e in parse_sse(r.text) if isinstance(e, dict)]
    assert not any("token_ids" in c or c.get("logprobs") for e in events for c in e.get("choices", []))
    assert events[-1]["guardrails"]["action"] == "redact"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_block_in_the_tool_arguments_blocks_the_choice(guarded, fake_llm, stream):
    engine = guarded()
    fake_llm.reply, fake_llm.split = "Calling the tool.", chars
    fake_llm.tool_arguments = '{"note": "Do Not Distribute"}'
    r = engine.chat(stream=stream)
    assert "Distribute" not in r.text
    if stream:
        events = [e for e in parse_sse(r.text) if isinstance(e, dict)]
        assert "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices", [])).endswith(
            "Blocked by the policy.")
        assert [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")] == [
            "content_filter"]
    else:
        choice = r.json()["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": "Blocked by the policy."}
        assert choice["finish_reason"] == "content_filter"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_responses_are_screened_and_so_is_what_is_stored(guarded, everywhere, stream):
    """``/v1/responses`` had no output policy at all."""
    engine = guarded()
    r = engine.http.post("/v1/responses", json={"input": "What is the key?", "stream": stream})
    assert r.status_code == 200, r.text
    fields = assert_no_key(r.text)
    if stream:
        assert fields[".delta"] == REDACTED
        done = next(e for e in objects(r.text) if e.get("type") == "response.completed")["response"]
    else:
        done = r.json()
    assert done["output"][-1]["content"][0]["text"] == REDACTED
    assert done["guardrails"]["action"] == "redact"
    stored = engine.http.get(f"/v1/responses/{done['id']}")
    assert stored.status_code == 200 and KEY not in stored.text
    assert stored.json()["output"][-1]["content"][0]["text"] == REDACTED


def test_a_block_ends_a_streamed_response(guarded, fake_llm):
    engine = guarded()
    fake_llm.reply = "Summary: fine. Do Not Distribute this plan. " + "More words. " * 40
    fake_llm.split = lambda text: [text[i:i + 3] for i in range(0, len(text), 3)]
    r = engine.http.post("/v1/responses", json={"input": "Summarise", "stream": True})
    assert "Distribute" not in r.text
    done = next(e for e in objects(r.text) if e.get("type") == "response.completed")["response"]
    assert done["output"][-1]["content"][0]["text"] == "Summary: fine. \n\nBlocked by the policy."
    assert done["guardrails"]["action"] == "block"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_session_answers_in_every_field_and_in_the_history(guarded, everywhere, stream):
    engine = guarded()
    sid = engine.http.post("/v1/sessions", json={}).json()["id"]
    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "the key?", "mode": "none", "stream": stream})
    assert r.status_code == 200
    assert_no_key(r.text)
    assert_no_key(engine.http.get(f"/v1/sessions/{sid}/messages").text)


# --- what the model writes beside a session's answer: tool calls, a reformulated question ---------------------
@pytest.fixture(scope="module")
def scripted_engine(embedder, tmp_path_factory):
    """A real engine (FAISS, the packaged model) whose LLM is scripted (tool calls), with the policy on."""
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app
    from tests.guardrails.conftest import POLICY, Engine
    from tests.support.embedding import serve_engine
    from tests.support.server import serve_app

    work = tmp_path_factory.mktemp("scripted-guarded")
    (work / "guardrails.yaml").write_text(POLICY)
    llm = ScriptedLLM(model="scripted")
    with serve_app(create_scripted_app(llm)) as llm_base:
        settings = EngineSettings(data_dir=work / "data", llm_url=llm_base + "/v1", llm_retries=0,
                                  guardrails_policy=work / "guardrails.yaml", sse_keepalive_s=0.2)
        with serve_engine(create_app(settings), embedder) as base:
            engine = Engine(base, None, work / "guardrails.yaml")
            engine.llm = llm  # type: ignore[attr-defined]
            yield engine
            engine.http.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_session_tool_call_events_and_their_history(scripted_engine, stream):
    from tests.conversations.scripted_llm import tool_call
    from tests.conversations.test_http import uploaded

    engine, llm = scripted_engine, scripted_engine.llm
    engine.primary = engine.secondary = llm  # what test_http's helpers read
    file_id = uploaded(engine, "pump.txt", "The cooling pump restarts after valve V-7 closes.")
    sid = engine.http.post("/v1/sessions", json={"file_ids": [file_id]}).json()["id"]
    llm.reset()
    llm.script = [{"content": None, "tool_calls": [tool_call(f"pump {KEY}", **{f"note {KEY}": 1})]},
                  {"content": f"The pump restarts; the key is {KEY}."}]
    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "How does the pump restart?",
                                                               "mode": "tools", "stream": stream})
    assert r.status_code == 200, r.text
    fields = assert_no_key(r.text)
    assert any("[REDACTED]" in v for p, v in fields.items() if "tool_calls" in p or p.endswith(".query")), fields
    assert_no_key(engine.http.get(f"/v1/sessions/{sid}/messages").text)


def test_a_reformulated_question_is_screened(scripted_engine):
    engine, llm = scripted_engine, scripted_engine.llm
    llm.reset()
    llm.script = [{"content": f"What is the key {KEY} for?"}]
    r = engine.http.post("/v1/chat/reformulate", json={"userMessage": "and that one?", "conversation": [
        {"role": "user", "content": "Which keys exist?"}, {"role": "assistant", "content": "Two."}]})
    assert r.status_code == 200, r.text
    assert_no_key(r.text)
    assert r.json()["reformulatedMessage"] == "What is the key [REDACTED] for?"


def test_an_evaluation_run_keeps_its_answers_screened(scripted_engine):
    """An evaluation run with ``answers: true`` (merged from main beside issue 41) keeps and shows each answer
    the model wrote: through the output policy, as a chat answer; the judge still scores what the model wrote."""
    engine, llm = scripted_engine, scripted_engine.llm
    indexed = engine.http.post("/index", json={"index_name": "evals", "documents": [
        {"doc_id": "pump", "text": "The cooling pump restarts after valve V-7 closes."}]})
    assert indexed.status_code == 200, indexed.text
    llm.reset()
    llm.script = [{"content": f"The pump restarts after V-7 closes; the key is {KEY}."},
                  {"content": '{"relevance": 5, "agreement": null}'}]
    started = engine.http.post("/indexes/evals/evaluations", json={"answers": True, "top_k": 1, "questions": [
        {"id": "q1", "question": "When does the pump restart?", "relevant_doc_ids": ["pump"]}]})
    assert started.status_code == 202, started.text
    run = started.json()
    while run["status"] in ("queued", "running"):
        time.sleep(0.05)
        run = engine.http.get(f"/indexes/evals/evaluations/{run['id']}").json()
    assert run["status"] == "succeeded" and run["answer_metrics"]["status"] == "ok", run
    assert run["results"][0]["answer"]["answer"] == "The pump restarts after V-7 closes; the key is [REDACTED]."
    assert_no_key(engine.http.get(f"/indexes/evals/evaluations/{run['id']}").text)
    assert KEY in llm.chats()[1]["messages"][-1]["content"]  # the judge read the answer as written
