"""The conversation API through a real uvicorn engine and scripted OpenAI-compatible LLMs."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragengine.conversations.models import FileRow, new_id
from ragengine.conversations.records import FileInfo, _file
from ragengine.protocol.sse import parse_sse
from tests.conversations.scripted_llm import tool_call
from tests.conversations.test_uploads import make_pdf


def upload(engine, name, data, ctype="text/plain", session_id=None):
    extra = {"data": {"session_id": session_id}} if session_id else {}
    return engine.http.post("/v1/files", files={"file": (name, data, ctype)}, **extra)


def wait_done(engine, file_id, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        info = engine.http.get(f"/v1/files/{file_id}").json()
        if info["ingestion_status"] in ("completed", "failed"):
            return info
        assert time.monotonic() < deadline, f"file stuck in {info['ingestion_status']}"
        time.sleep(0.05)


def uploaded(engine, name, text):
    r = upload(engine, name, text.encode())
    assert r.status_code == 202, r.text
    info = wait_done(engine, r.json()["file_id"])
    assert info["ingestion_status"] == "completed", info
    return info["file_id"]


def session(engine, **body):
    r = engine.http.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def say(engine, sid, content, **body):
    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": content, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_upload_lifecycle_and_bad_input(engine):
    r = upload(engine, "cats.md", b"# Cats\n\nCats sleep sixteen hours a day.", "text/markdown")
    assert r.status_code == 202 and r.json()["ingestion_status"] == "uploaded"
    info = wait_done(engine, r.json()["file_id"])
    assert (info["ingestion_status"], info["progress"], info["documents"]) == ("completed", 1.0, 1)
    assert engine.http.get("/v1/files/file_nope").status_code == 404
    assert upload(engine, "a.zip", b"PK\x03\x04", "application/zip").status_code == 415
    big = upload(engine, "big.txt", b"x" * 200_001)
    assert big.status_code == 413 and big.json()["error"]["code"] == 413
    broken = upload(engine, "broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog", "application/pdf")
    assert broken.status_code == 202
    failed = wait_done(engine, broken.json()["file_id"])
    assert failed["ingestion_status"] == "failed" and "PDF" in failed["reason"]
    good = upload(engine, "doc.pdf", make_pdf(["Zebras have black and white stripes."]), "application/pdf")
    assert wait_done(engine, good.json()["file_id"])["ingestion_status"] == "completed"
    assert engine.http.delete(f"/v1/files/{good.json()['file_id']}").json()["deleted"]
    assert engine.http.get(f"/v1/files/{good.json()['file_id']}").status_code == 404


def test_session_lifecycle_rag_answer_and_404s(engine):
    fid = uploaded(engine, "soup.txt", "The Mushroom Soup takes 25 minutes to cook. It needs cream and thyme.")
    sid = session(engine, user_id="u-life", title="Dinner", file_ids=[fid])
    assert [s["id"] for s in engine.http.get("/v1/sessions", params={"user_id": "u-life"}).json()["data"]] == [sid]
    out = say(engine, sid, "How long does the mushroom soup take?")
    meta = out["assistant_message"]["metadata"]
    assert out["assistant_message"]["content"] == "The Mushroom Soup takes 25 minutes to cook."
    assert meta["generation_method"] == "llm" and meta["endpoint"] in (engine.primary.base, engine.secondary.base)
    assert {s["metadata"]["file_id"] for s in meta["sources"]} == {fid}
    assert meta["groundedness"]["score"] > 0.7 and not meta["groundedness"]["flagged"]
    history = engine.http.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    details = engine.http.get(f"/v1/sessions/{sid}").json()
    assert details["message_count"] == 2 and details["files"][0]["file_id"] == fid
    assert engine.http.delete(f"/v1/sessions/{sid}").json()["deleted"]
    for method, path, body in [("GET", f"/v1/sessions/{sid}", None), ("GET", f"/v1/sessions/{sid}/messages", None),
                               ("POST", f"/v1/sessions/{sid}/messages", {"content": "x"}),
                               ("POST", f"/v1/sessions/{sid}/messages", {"content": "x", "stream": True}),
                               ("DELETE", f"/v1/sessions/{sid}", None)]:
        r = engine.http.request(method, path, json=body)
        assert r.status_code == 404 and "No such session" in r.json()["error"]["message"], (method, path)
    other = session(engine)
    assert engine.http.post(f"/v1/sessions/{other}/messages", json={"content": "x", "thread_id": "t"}).status_code == 404
    assert engine.http.get(f"/v1/sessions/{other}/threads/nope").status_code == 404
    assert engine.http.post("/v1/sessions", json={"file_ids": ["file_nope"]}).status_code == 404


def test_streaming_progress_events_and_keepalive(engine):
    fid = uploaded(engine, "tea.txt", "Green tea is brewed at 80 degrees. Black tea needs boiling water.")
    sid = session(engine, file_ids=[fid])
    engine.primary.delay_s = engine.secondary.delay_s = 0.5  # longer than the 0.2 s keep-alive interval
    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "How hot for green tea?", "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert ": keep-alive" in r.text
    events = parse_sse(r.text)
    assert events[-1] == "[DONE]"
    types = [e["type"] for e in events[:-1]]
    assert types[:4] == ["message_start", "rag_start", "context_found", "generation_start"]
    assert types[-1] == "message_complete" and types.count("text_chunk") >= 3
    done = events[-2]
    text = "".join(e["content"] for e in events if isinstance(e, dict) and e["type"] == "text_chunk")
    assert done["assistant_message"]["content"] == text == "Green tea is brewed at 80 degrees."
    assert done["metadata"]["sources"] and "groundedness" in done["metadata"] and done["metadata"]["endpoint"]


def test_tool_mode_cannot_leave_the_conversation_scope(engine):
    mine = uploaded(engine, "alpha.txt", "The alpha launch code is kept in the blue safe.")
    theirs = uploaded(engine, "beta.txt", "The beta launch code is 7781 and kept in the red safe.")
    sid = session(engine, file_ids=[mine])
    session(engine, file_ids=[theirs])
    widen = [tool_call("beta launch code red safe", file_ids=[theirs]),
             tool_call("beta launch code", filters={"type": "eq", "key": "file_id", "value": theirs}),
             tool_call(raw='{"query": "launch code", "top_k": 50, "file_id": "*", "index_name": "conversations"}')]
    for llm in (engine.primary, engine.secondary):
        llm.script = [{"content": None, "tool_calls": widen}]
    out = say(engine, sid, "What is the beta launch code?", mode="tools")
    meta = out["assistant_message"]["metadata"]
    assert meta["generation_method"] == "llm_tools" and len(meta["tool_calls"]) == 3
    assert {s["metadata"]["file_id"] for s in meta["sources"]} == {mine}
    assert meta["tool_calls"][0]["ignored_arguments"] == ["file_ids"]
    assert all(c["scope_file_ids"] == [mine] for c in meta["tool_calls"])
    sent = [m for llm in (engine.primary, engine.secondary) for b in llm.chats() for m in b["messages"]]
    tool_msgs = [m for m in sent if m["role"] == "tool"]
    assert tool_msgs and not any("7781" in m["content"] for m in tool_msgs)
    tool_defs = [b["tools"] for llm in (engine.primary, engine.secondary) for b in llm.chats() if b.get("tools")]
    assert tool_defs and set(tool_defs[0][0]["function"]["parameters"]["properties"]) == {"query", "top_k"}
    assert "alpha launch code" in out["assistant_message"]["content"]


def test_fallback_chain_reports_who_answered(engine):
    fid = uploaded(engine, "owl.txt", "Owls hunt at night. Barn owls eat mice and voles.")
    sid = session(engine, file_ids=[fid])
    engine.primary.fail_status = 500
    meta = say(engine, sid, "When do owls hunt?")["assistant_message"]["metadata"]
    assert meta["generation_method"] == "llm" and meta["endpoint"] == engine.secondary.base
    engine.secondary.fail_status = 503
    out = say(engine, sid, "What do barn owls eat?")
    meta = out["assistant_message"]["metadata"]
    assert meta["generation_method"] == "extractive_fallback" and meta["endpoint"] is None
    assert "unavailable" in meta["fallback_reason"].lower()
    assert "Barn owls eat mice and voles." in out["assistant_message"]["content"]
    stream = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "Owls?", "stream": True})
    events = [e for e in parse_sse(stream.text) if isinstance(e, dict)]
    gen = [e for e in events if e["type"] == "generation_start"]
    assert gen[-1]["generation_method"] == "extractive_fallback" and events[-1]["type"] == "message_complete"


def being_ingested(engine, filename: str, text: str) -> FileInfo:
    """A file that another replica's worker is ingesting: ``processing``, its text extracted, its lease held for
    an hour, made in one transaction. (Made ``uploaded`` first, it was an open job on PostgreSQL's shared queue,
    which this engine's worker could claim, and fail for want of bytes, before the test marked it.)"""
    store = engine.app.state.sessions  # loop-agnostic: usable from the test thread
    held = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)  # the database's UTC clock

    def make(s) -> FileInfo:
        row = FileRow(id=new_id("file"), filename=filename, content_type="text/plain", size_bytes=len(text),
                      status="processing", progress=0.5, text=text, doc_ids={}, lease_owner="another-replica/1",
                      lease_expires_at=held, attempts=1)
        s.add(row)
        s.flush()
        return _file(row)
    return asyncio.run(store._run(make))


def test_inline_text_until_ingestion_completes(engine):
    info = being_ingested(engine, "late.txt", "The vault combination is 4242. Nobody else knows it.")
    sid = session(engine, file_ids=[info.id])
    out = say(engine, sid, "What is the vault combination?")
    meta = out["assistant_message"]["metadata"]
    assert meta["inline_files"] == [{"file_id": info.id, "filename": "late.txt", "truncated": False}]
    assert meta["scope_file_ids"] == [] and meta["sources"] == []
    system = [b for llm in (engine.primary, engine.secondary) for b in llm.chats()][-1]["messages"][0]["content"]
    assert "4242" in system
    assert out["assistant_message"]["content"] == "The vault combination is 4242."
    # tool mode with nothing searchable yet: no pointless tool round, the inline text answers
    meta = say(engine, sid, "Tell me the combination again", mode="tools")["assistant_message"]["metadata"]
    assert meta["tools_skipped"] and meta["generation_method"] == "llm" and meta["inline_files"]
    blank = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "   "})
    assert blank.status_code == 400 and "empty" in blank.json()["error"]["message"]


def test_threads_over_http(engine):
    sid = session(engine)
    first = say(engine, sid, "Hello there", mode="none")
    say(engine, sid, "Second question on main", mode="none")
    branch = engine.http.post(f"/v1/sessions/{sid}/threads",
                              json={"parent_message_id": first["assistant_message"]["id"], "title": "alt"})
    assert branch.status_code == 201
    tid = branch.json()["id"]
    say(engine, sid, "Branch question", mode="none", thread_id=tid)
    thread = engine.http.get(f"/v1/sessions/{sid}/threads/{tid}").json()
    assert [m["content"] for m in thread["messages"]][:2] == ["Hello there", first["assistant_message"]["content"]]
    assert thread["messages"][2]["content"] == "Branch question" and len(thread["messages"]) == 4
    threads = engine.http.get(f"/v1/sessions/{sid}/threads").json()["data"]
    assert {t["id"] for t in threads} == {"main", tid}
    main = engine.http.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert "Branch question" not in [m["content"] for m in main]
    # the branch's LLM call saw the inherited history, not main's second question
    last = [b for llm in (engine.primary, engine.secondary) for b in llm.chats()][-1]["messages"]
    contents = [m["content"] for m in last]
    assert "Hello there" in contents and "Second question on main" not in contents
    bad = engine.http.post(f"/v1/sessions/{sid}/threads", json={"parent_message_id": "msg_nope"})
    assert bad.status_code == 404


def test_reformulate_endpoint_and_in_session(engine):
    history = [{"role": "user", "content": "I want something vegetarian"},
               {"role": "assistant", "content": "Mushroom Soup or Chickpea Risotto"}]
    rewritten = "Between the Mushroom Soup and the Chickpea Risotto, which is quickest to cook?"
    for llm in (engine.primary, engine.secondary):
        llm.script = [{"content": rewritten}]
    r = engine.http.post("/v1/chat/reformulate", json={"userMessage": "Which is quickest?", "conversation": history})
    assert r.status_code == 200 and r.json()["reformulatedMessage"] == rewritten and r.json()["reformulated"]
    calls = sum(len(llm.chats()) for llm in (engine.primary, engine.secondary))
    r = engine.http.post("/v1/chat/reformulate", json={"userMessage": "Which is quickest?", "conversation": []})
    assert r.json()["reformulatedMessage"] == "Which is quickest?" and r.json()["reason"] == "no history"
    assert sum(len(llm.chats()) for llm in (engine.primary, engine.secondary)) == calls  # no LLM call
    assert engine.http.post("/v1/chat/reformulate", json={"conversation": []}).status_code == 400

    fid = uploaded(engine, "recipes.txt", "The Mushroom Soup takes 25 minutes. The Chickpea Risotto takes 45 minutes.")
    sid = session(engine, file_ids=[fid])
    say(engine, sid, "I want something vegetarian")
    for llm in (engine.primary, engine.secondary):
        llm.script = [{"content": rewritten}]
    meta = say(engine, sid, "Which is quickest?", reformulate=True)["assistant_message"]["metadata"]
    assert meta["query_used"] == rewritten and meta["reformulation"]["reformulated"]


def _samples(engine) -> dict[tuple[str, tuple], float]:
    """Every sample of the engine's /metrics, by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(engine.http.get("/metrics").text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_a_session_answer_is_counted_in_the_metrics(engine):
    """One RAG answer in a session: one more message counted for mode rag / llm, and one groundedness score
    observed, of the value the answer reports (not merely the metric names, which /metrics always lists)."""
    fid = uploaded(engine, "tea.txt", "Green tea steeps for two minutes at eighty degrees.")
    sid = session(engine, file_ids=[fid])
    before = _samples(engine)
    meta = say(engine, sid, "How long does green tea steep?")["assistant_message"]["metadata"]
    after = _samples(engine)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert meta["generation_method"] == "llm" and meta["groundedness"]["score"] is not None
    assert delta("ragengine_session_messages_total", mode="rag", generation_method="llm") == 1
    assert delta("ragengine_groundedness_score_count", mode="rag") == 1
    assert delta("ragengine_groundedness_score_sum", mode="rag") == pytest.approx(meta["groundedness"]["score"], abs=0.01)
