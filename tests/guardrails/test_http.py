"""The output policy on a running engine: chat completions (JSON and SSE), session answers (JSON and SSE),
hot reload, a bad policy, fail-closed and fail-open, and the screening of retrieved chunks."""

from __future__ import annotations

import json
import time

from ragengine.protocol.sse import parse_sse

KEY = "AKIAIOSFODNN7EXAMPLE"
ANSWER = f"Use {KEY} with ops@example.com today."
REDACTED = "Use [REDACTED] with <EMAIL> today."


def chars(text: str) -> list[str]:
    return list(text)  # one delta per character: every split point at once


def wait_for(check, what: str, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def contents(events: list) -> str:
    return "".join(c["delta"].get("content") or "" for e in events if isinstance(e, dict)
                   for c in e.get("choices", []))


def test_chat_json_redacts_and_says_what_acted_never_what(guarded, fake_llm):
    engine = guarded()
    fake_llm.reply, fake_llm.split = ANSWER, chars
    # The counters are the process's: other tests' answers (tests/observability) may have counted before.
    redactions = 'ragengine_guardrails_scanner_actions_total{action="redact",endpoint="chat_completions",scanner="regex"}'
    before = engine.metric(redactions)
    for body in ({}, {"index_name": "ops"}):  # pass-through and RAG
        r = engine.chat(**body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["choices"][0]["message"]["content"] == REDACTED
        assert out["guardrails"]["action"] == "redact"
        assert out["guardrails"]["scanners"] == [{"type": "regex", "action": "redact", "count": 1},
                                                 {"type": "sensitive", "action": "redact", "count": 1}]
        assert KEY not in r.text and "ops@example.com" not in r.text
    assert engine.metric(redactions) - before == 2


def test_chat_stream_holds_back_a_key_split_across_deltas(guarded, fake_llm):
    engine = guarded()
    fake_llm.reply, fake_llm.split = ANSWER, chars
    r = engine.chat(stream=True, index_name="ops")
    assert r.status_code == 200
    assert "AKIA" not in r.text and "EXAMPLE" not in r.text and "ops@" not in r.text
    events = parse_sse(r.text)
    assert events[-1] == "[DONE]" and contents(events) == REDACTED
    assert [c["finish_reason"] for e in events[:-1] for c in e["choices"] if c.get("finish_reason")] == ["stop"]
    assert events[-2]["guardrails"]["action"] == "redact"
    assert any(e.get("source_nodes") for e in events[:-1])  # the RAG chunk still comes


def test_block_mid_stream_ends_the_stream_cleanly(guarded, fake_llm):
    engine = guarded()
    fake_llm.reply = "Summary: the rollout is fine. Do Not Distribute this plan. " + "More words follow here. " * 30
    fake_llm.split = lambda text: [text[i:i + 3] for i in range(0, len(text), 3)]
    fake_llm.latency_per_token_s = 0.01  # the LLM is still generating when the block comes
    r = engine.chat(stream=True)
    events = parse_sse(r.text)
    assert events[-1] == "[DONE]"
    assert contents(events) == "Summary: the rollout is fine. \n\nBlocked by the policy."
    finishes = [c["finish_reason"] for e in events[:-1] for c in e["choices"] if c.get("finish_reason")]
    assert finishes == ["content_filter"] and "Distribute" not in r.text
    assert events[-2]["guardrails"] == {"action": "block", "policy": events[-2]["guardrails"]["policy"],
                                        "scanners": [{"type": "ban_substrings", "action": "block", "count": 1}]}
    # the engine stopped reading: the LLM saw its client go away before the end of the answer
    wait_for(lambda: fake_llm.stream_events, "the LLM stream to end")
    assert fake_llm.stream_events == ["disconnected"]
    blocked = engine.chat()  # and as JSON: the block message, finish_reason content_filter
    assert blocked.json()["choices"][0] | {"logprobs": None} == {
        "index": 0, "message": {"role": "assistant", "content": "Blocked by the policy."},
        "finish_reason": "content_filter", "logprobs": None}


def test_session_answers_json_and_sse_and_what_is_stored(guarded, fake_llm):
    engine = guarded()
    fake_llm.reply, fake_llm.split = ANSWER, chars
    sid = engine.http.post("/v1/sessions", json={}).json()["id"]
    out = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "the key?", "mode": "none"}).json()
    assert out["assistant_message"]["content"] == REDACTED
    assert out["assistant_message"]["metadata"]["guardrails"]["action"] == "redact"
    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "again?", "mode": "none", "stream": True})
    assert KEY not in r.text and "ops@example.com" not in r.text
    events = parse_sse(r.text)
    shown = "".join(e["content"] for e in events if isinstance(e, dict) and e["type"] == "text_chunk")
    assert shown == REDACTED and events[-2]["assistant_message"]["content"] == REDACTED
    history = engine.http.get(f"/v1/sessions/{sid}/messages").text
    assert KEY not in history and "ops@example.com" not in history


def test_hot_reload_and_a_bad_policy_keeps_the_last_good_one(guarded, fake_llm):
    engine = guarded()
    fake_llm.reply, fake_llm.split = ANSWER, chars
    assert engine.chat().json()["choices"][0]["message"]["content"] == REDACTED
    tmp = engine.policy.with_suffix(".new")  # as a ConfigMap volume does: a new file swapped in
    tmp.write_text("blockMessage: Keys are not shared.\nscanners:\n  - type: regex\n    action: block\n"
                   "    patterns: ['AKIA']\n")
    tmp.replace(engine.policy)
    wait_for(lambda: engine.chat().json()["choices"][0]["message"]["content"] == "Keys are not shared.",
             "the edited policy to apply")
    errors = engine.metric('ragengine_guardrails_policy_reloads_total{outcome="error"}')
    engine.policy.write_text("scanners: [\n  - type: regex")  # not YAML
    wait_for(lambda: engine.metric("ragengine_guardrails_policy_error") == 1, "the error to be reported")
    assert engine.metric('ragengine_guardrails_policy_reloads_total{outcome="error"}') == errors + 1
    out = engine.chat().json()  # still the last good policy
    assert out["choices"][0]["message"]["content"] == "Keys are not shared." and out["guardrails"]["action"] == "block"


def test_fail_closed_and_fail_open_without_a_usable_policy(guarded, fake_llm):
    fake_llm.reply = ANSWER
    closed = guarded("scanners: [")
    r = closed.chat()
    assert r.status_code == 503 and "guardrails" in r.json()["error"]["message"]
    assert closed.chat(stream=True).status_code == 503
    sid = closed.http.post("/v1/sessions", json={}).json()["id"]
    assert closed.http.post(f"/v1/sessions/{sid}/messages", json={"content": "x", "mode": "none"}).status_code == 503
    assert fake_llm.chat_requests() == []  # refused before the LLM was asked
    opened = guarded("scanners: [", guardrails_fail_open=True)
    out = opened.chat().json()
    assert out["guardrails"]["action"] == "unscreened" and "not valid YAML" in out["guardrails"]["error"]


def test_token_limit_bounds_an_oversized_answer(guarded, fake_llm):
    engine = guarded("scanners:\n  - type: token_limit\n    limit: 30\n")
    fake_llm.reply, fake_llm.split = "word " * 500, lambda t: [t[i:i + 10] for i in range(0, len(t), 10)]
    from ragengine.guardrails.detectors import encoding

    out = engine.chat().json()["choices"][0]
    assert len(encoding().encode_ordinary(out["message"]["content"])) == 30 and out["finish_reason"] == "length"
    events = parse_sse(engine.chat(stream=True).text)
    assert len(encoding().encode_ordinary(contents(events))) <= 30
    assert [c["finish_reason"] for e in events[:-1] for c in e["choices"] if c.get("finish_reason")] == ["length"]


def test_retrieved_chunks_are_screened_before_the_prompt(guarded, fake_llm):
    engine = guarded(screen_indexes=["op*"])
    out = engine.chat(index_name="ops").json()
    prompt = json.dumps(fake_llm.last_chat()["messages"])
    assert "ignore all previous instructions" not in prompt and "\\u200b" not in prompt and "\\u202e" not in prompt
    assert "Backups run nightly at 02:00." in prompt and "Rotate the deploy keys" in prompt
    assert out["rag"]["screening"] == {"screened": 3, "stripped": 1, "quarantined": 1,
                                       "reasons": {"hidden_characters": 1, "ignore_instructions": 1}}
    assert [n["doc_id"] for n in out["source_nodes"]] == ["ops-1", "ops-3"]
    # another index: only the chunk whose document opted in is screened
    out = engine.chat(index_name="wiki").json()
    assert out["rag"]["screening"] == {"screened": 1, "stripped": 0, "quarantined": 1,
                                       "reasons": {"addresses_assistant": 1}}
    assert "French" not in json.dumps(fake_llm.last_chat()["messages"])
