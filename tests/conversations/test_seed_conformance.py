"""Session messages against the seeds (issue 11), through the real app with scripted LLMs.

Each test names the seed clause it pins; each failed on the code before the fix (see the report).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragengine.protocol.sse import parse_sse
from tests.conversations.scripted_llm import tool_call
from tests.conversations.test_http import say, session, upload, uploaded, wait_done

CANONICAL = ["message_start", "reformulated", "rag_start", "tool_call", "context_found", "generation_start",
             "text_chunk", "message_complete"]


def both(engine):
    return (engine.primary, engine.secondary)


def script(engine, *messages):
    for llm in both(engine):
        llm.script = [dict(m) for m in messages]


def chats(engine) -> list[dict]:
    return sorted((r for llm in both(engine) for r in llm.requests if r["path"] == "/v1/chat/completions"),
                  key=lambda r: r["time"])


def stream(engine, sid, content, **body) -> list:
    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": content, "stream": True, **body})
    assert r.status_code == 200, r.text
    return parse_sse(r.text)


def assert_seed_order(events: list) -> list[str]:
    """The seed's order: message_start → (reformulated) → rag_start → (tool_call…) → context_found →
    generation_start → text_chunk… → message_complete → [DONE], each step once except tool calls and text."""
    assert events[-1] == "[DONE]"
    types = [e["type"] for e in events[:-1]]
    positions = [CANONICAL.index(t) for t in types]
    assert positions == sorted(positions), types
    for once in ("message_start", "reformulated", "rag_start", "context_found", "generation_start", "message_complete"):
        assert types.count(once) <= 1, (once, types)
    assert types[0] == "message_start" and types[-1] == "message_complete" and "text_chunk" in types
    return types


@pytest.fixture
def settings(engine, monkeypatch):
    """The shared engine's settings, changed for one test only."""
    return lambda **values: [monkeypatch.setattr(engine.app.state.settings, k, v) for k, v in values.items()]


# --- item 6: SSE order in every mode ---------------------------------------------------------------
def test_sse_order_in_rag_tools_and_none_modes(engine):
    fid = uploaded(engine, "kiwi.txt", "Kiwis are flightless birds from New Zealand. They are nocturnal.")
    sid = session(engine, file_ids=[fid])
    types = assert_seed_order(stream(engine, sid, "Where are kiwis from?"))
    assert types[:4] == ["message_start", "rag_start", "context_found", "generation_start"]

    script(engine, {"content": None, "tool_calls": [tool_call("kiwi origin")]})
    types = assert_seed_order(stream(engine, sid, "Where do kiwis live?", mode="tools"))
    assert types[:5] == ["message_start", "rag_start", "tool_call", "context_found", "generation_start"]

    types = assert_seed_order(stream(engine, sid, "Just say hi", mode="none"))
    assert types[:2] == ["message_start", "generation_start"] and "rag_start" not in types


def test_an_llm_failure_before_any_text_sends_one_generation_start(engine):
    fid = uploaded(engine, "yak.txt", "Yaks live in the Himalayas. Their milk is pink in legends only.")
    sid = session(engine, file_ids=[fid])
    for llm in both(engine):
        llm.fail_status = 503
    for mode in ("rag", "tools"):
        events = stream(engine, sid, "Where do yaks live?", mode=mode)
        types = assert_seed_order(events)
        starts = [e for e in events[:-1] if e["type"] == "generation_start"]
        assert len(starts) == 1 and starts[0]["generation_method"] == "extractive_fallback", (mode, types)


# --- item 7: tool rounds as the seed specifies ---------------------------------------------------
def test_the_call_after_tool_results_has_no_tools_and_an_empty_query_searches_the_message(engine):
    fid = uploaded(engine, "moth.txt", "Moths are attracted to lamps at night. Most moths are nocturnal.")
    sid = session(engine, file_ids=[fid])
    script(engine, {"content": None, "tool_calls": [tool_call("")]})
    out = say(engine, sid, "Why are moths attracted to lamps?", mode="tools")
    meta = out["assistant_message"]["metadata"]
    call = meta["tool_calls"][0]
    assert "error" not in call and call["query"] == "Why are moths attracted to lamps?" and call["results"] >= 1
    sent = chats(engine)
    assert len(sent) == 2 and sent[0]["body"].get("tools") and not sent[1]["body"].get("tools")
    assert meta["generation_method"] == "llm_tools" and meta["tool_iterations"] == 1


# --- item 8: fallbacks for every upstream failure -------------------------------------------------
def test_upstream_4xx_falls_back_along_the_chain_then_to_the_extractive_answer(engine, settings):
    fid = uploaded(engine, "emu.txt", "Emus can run at fifty kilometres per hour. They cannot fly.")
    sid = session(engine, file_ids=[fid])
    engine.primary.fail_status = 429  # rate limited: the secondary answers
    meta = say(engine, sid, "How fast can emus run?")["assistant_message"]["metadata"]
    assert meta["generation_method"] == "llm" and meta["endpoint"] == engine.secondary.base
    engine.secondary.fail_status = 401  # and a bad key on the secondary: the documents answer
    for mode in ("rag", "tools"):
        out = say(engine, sid, "How fast can emus run?", mode=mode)
        meta = out["assistant_message"]["metadata"]
        assert meta["generation_method"] == "extractive_fallback", mode
        assert "HTTP 401" in meta["fallback_reason"] and "fifty kilometres" in out["assistant_message"]["content"]
    history = engine.http.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert [m["role"] for m in history] == ["user", "assistant"] * 3

    settings(extractive_fallback=False)  # those who prefer the error get it, and the history says so
    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "How fast can emus run?"})
    assert r.status_code in (401, 429) and "scripted failure" in r.json()["error"]["message"]
    last = engine.http.get(f"/v1/sessions/{sid}/messages").json()["data"][-2:]
    assert [m["role"] for m in last] == ["user", "assistant"]
    assert last[1]["metadata"]["generation_method"] == "none" and "HTTP 401" in last[1]["metadata"]["fallback_reason"]


# --- item 9 and issue 16 item 5: groundedness acts --------------------------------------------------
def metric(engine, name: str, labels: dict) -> float:
    for family in text_string_to_metric_families(engine.http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def test_grounded_and_invented_answers_on_the_same_context(engine):
    fid = uploaded(engine, "otter.txt", "Sea otters hold hands while they sleep so they do not drift apart. "
                                        "They use rocks to open shellfish.")
    sid = session(engine, file_ids=[fid])
    before = {
        "llm": metric(engine, "ragengine_session_messages_total", {"mode": "rag", "generation_method": "llm"}),
        "scored": metric(engine, "ragengine_groundedness_score_count", {"mode": "rag"}),
        "flagged": metric(engine, "ragengine_ungrounded_answers_total", {"mode": "rag"}),
    }
    grounded_text = "Sea otters hold hands while they sleep so they do not drift apart."
    invented_text = "Sea otters migrate to Jupiter every winter and vote in municipal elections by telegram."
    script(engine, {"content": grounded_text})
    grounded = say(engine, sid, "Why do sea otters hold hands?")["assistant_message"]
    script(engine, {"content": invented_text})
    invented = say(engine, sid, "Why do sea otters hold hands?")["assistant_message"]

    g, i = grounded["metadata"]["groundedness"], invented["metadata"]["groundedness"]
    assert g["score"] > i["score"] and not g["flagged"] and i["flagged"], (g, i)
    assert g["threshold"] == i["threshold"] == 0.7  # the seed's confidence threshold
    assert grounded["content"] == grounded_text and "disclaimer" not in g
    disclaimer = engine.app.state.settings.groundedness_disclaimer
    assert invented["content"] == f"{invented_text}\n\n{disclaimer}" and i["disclaimer"] is True
    assert i["unsupported_sentences"] == [invented_text]
    # the metrics count exactly these two answers
    assert metric(engine, "ragengine_session_messages_total", {"mode": "rag", "generation_method": "llm"}) == \
        before["llm"] + 2
    assert metric(engine, "ragengine_groundedness_score_count", {"mode": "rag"}) == before["scored"] + 2
    assert metric(engine, "ragengine_ungrounded_answers_total", {"mode": "rag"}) == before["flagged"] + 1


def test_the_disclaimer_streams_before_message_complete(engine, settings):
    fid = uploaded(engine, "newt.txt", "Newts are amphibians that regrow lost limbs.")
    sid = session(engine, file_ids=[fid])
    script(engine, {"content": "Newts are famous jazz pianists from Paris."})
    events = stream(engine, sid, "What can newts do?")
    assert_seed_order(events)
    text = "".join(e["content"] for e in events[:-1] if e["type"] == "text_chunk")
    assert text == events[-2]["assistant_message"]["content"] and text.endswith(
        engine.app.state.settings.groundedness_disclaimer)
    settings(groundedness_disclaimer="")
    script(engine, {"content": "Newts are famous jazz pianists from Paris."})
    out = say(engine, sid, "What can newts do?")["assistant_message"]
    assert out["content"] == "Newts are famous jazz pianists from Paris." and out["metadata"]["groundedness"]["flagged"]


# --- item 2: reformulated questions reach the LLM ------------------------------------------------
def test_the_standalone_question_reaches_the_llm_and_later_turns(engine, settings):
    fid = uploaded(engine, "menu.txt", "The Mushroom Soup takes 25 minutes. The Chickpea Risotto takes 45 minutes.")
    sid = session(engine, file_ids=[fid])
    say(engine, sid, "I want something vegetarian")
    rewritten = "Which is quickest to cook, the Mushroom Soup or the Chickpea Risotto?"
    script(engine, {"content": rewritten})
    out = say(engine, sid, "Which is quickest?", reformulate=True)
    answer_call = chats(engine)[-1]["body"]["messages"]
    assert answer_call[-1] == {"role": "user", "content": rewritten}
    history = engine.http.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert history[-2]["content"] == "Which is quickest?"  # what the user sees is their own words
    assert out["assistant_message"]["metadata"]["query_used"] == rewritten
    say(engine, sid, "And how long does it take?")
    later = chats(engine)[-1]["body"]["messages"]
    assert {"role": "user", "content": rewritten} in later and {"role": "user", "content": "Which is quickest?"} \
        not in later

    settings(reformulated_query_to_llm=False)  # today's behaviour on request: retrieval only
    script(engine, {"content": rewritten})
    say(engine, sid, "Which is quickest?", reformulate=True)
    assert chats(engine)[-1]["body"]["messages"][-1] == {"role": "user", "content": "Which is quickest?"}


# --- item 3: queued uploads are visible ----------------------------------------------------------
@contextlib.contextmanager
def held_ingestion(engine, prefix: str):
    """Files whose name starts with ``prefix`` wait in their worker until released (a long ingestion)."""
    worker = engine.app.state.ingestion
    real = worker.process
    release = asyncio.Event()
    loop = {}

    async def process(claim) -> None:
        info = await worker.store.get_file(claim.file_id)
        if info.filename.startswith(prefix):
            loop["loop"] = asyncio.get_running_loop()
            await release.wait()
        await real(claim)

    worker.process = process
    try:
        yield
    finally:
        worker.process = real
        if "loop" in loop:
            loop["loop"].call_soon_threadsafe(release.set)


def test_a_queued_upload_is_inline_at_once_and_does_not_starve_the_others(engine):
    with held_ingestion(engine, "slow"):
        slow = upload(engine, "slow-vault.txt", b"The vault combination is 4242. Nobody else knows it.")
        assert slow.status_code == 202
        sid = session(engine, file_ids=[slow.json()["file_id"]])
        out = say(engine, sid, "What is the vault combination?")
        meta = out["assistant_message"]["metadata"]
        assert [f["file_id"] for f in meta["inline_files"]] == [slow.json()["file_id"]]
        assert out["assistant_message"]["content"] == "The vault combination is 4242."
        # a second file is ingested by the other worker while the first one is still held
        quick = upload(engine, "quick.txt", b"Quick files are not held up.")
        assert wait_done(engine, quick.json()["file_id"], timeout=60)["ingestion_status"] == "completed"
        assert engine.http.get(f"/v1/files/{slow.json()['file_id']}").json()["ingestion_status"] in (
            "uploaded", "processing")
    assert wait_done(engine, slow.json()["file_id"])["ingestion_status"] == "completed"


# --- item 4: nothing a client sends is silently ignored ------------------------------------------
def test_seed_fields_are_honoured_and_unknown_fields_refused(engine, settings):
    settings(similarity_threshold=0.0)  # both files must be candidates for rag_limit to show
    a = uploaded(engine, "lynx-a.txt", "Lynxes have tufted ears.")
    b = uploaded(engine, "lynx-b.txt", "Lynxes hunt snowshoe hares.")
    created = engine.http.post("/v1/sessions", json={"file_ids": [a, b]})
    assert created.status_code == 201 and created.json()["session_id"] == created.json()["id"]
    sid = created.json()["id"]

    r = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "Lynx?", "temprature": 0.2})
    assert r.status_code == 400 and "temprature" in r.json()["error"]["message"]
    assert engine.http.post("/v1/sessions", json={"titel": "x"}).status_code == 400

    out = say(engine, sid, "Tell me about lynxes", rag_limit=1)
    assert len(out["assistant_message"]["metadata"]["sources"]) == 1
    assert len(say(engine, sid, "Tell me about lynxes")["assistant_message"]["metadata"]["sources"]) == 2
    meta = say(engine, sid, "Tell me about lynxes", use_rag=False)["assistant_message"]["metadata"]
    assert meta["mode"] == "none" and not meta["sources"] and "groundedness" not in meta
    assert engine.http.post(f"/v1/sessions/{sid}/messages",
                            json={"content": "x", "use_rag": False, "mode": "rag"}).status_code == 400
    assert engine.http.post(f"/v1/sessions/{sid}/messages",
                            json={"content": "x", "session_id": "sess_other"}).status_code == 400
    assert say(engine, sid, "Hello again", session_id=sid, mode="none")["session_id"] == sid

    # threading as the seed's clients do it: parent_message_id + a new thread id
    first = engine.http.get(f"/v1/sessions/{sid}/messages").json()["data"][1]
    out = say(engine, sid, "A branch question", mode="none", parent_message_id=first["id"], thread_id="thread-456")
    assert out["thread_id"] == "thread-456"
    thread = engine.http.get(f"/v1/sessions/{sid}/threads/thread-456").json()
    assert [m["content"] for m in thread["messages"]][-2] == "A branch question"
    again = engine.http.post(f"/v1/sessions/{sid}/messages", json={"content": "x", "parent_message_id": first["id"],
                                                                    "thread_id": "thread-456"})
    assert again.status_code == 409
    made = engine.http.post(f"/v1/sessions/{sid}/threads", json={"parent_message_id": first["id"],
                                                                  "new_thread_id": "thread-789"})
    assert made.status_code == 201 and made.json()["id"] == "thread-789"


# --- item 5: session creation cannot widen the scope ---------------------------------------------
def test_a_session_cannot_name_the_uploads_index(engine):
    theirs = uploaded(engine, "secret.txt", "The staff wifi password is hunter2-orchid.")
    session(engine, file_ids=[theirs])
    index = engine.app.state.settings.conversation_index
    r = engine.http.post("/v1/sessions", json={"index_name": index})
    assert r.status_code == 400 and r.json()["error"]["param"] == "index_name"
    # and a session that names a real knowledge index still only sees its own uploads in the shared index
    mine = session(engine)
    out = say(engine, mine, "What is the staff wifi password?")
    assert "hunter2" not in out["assistant_message"]["content"]
    assert out["assistant_message"]["metadata"]["sources"] == []


# --- issue 16 item 6: a client that leaves mid-answer -------------------------------------------
def test_client_disconnect_mid_answer_stores_the_partial_answer_flagged_truncated(engine):
    fid = uploaded(engine, "heron.txt", "Herons stand still in shallow water and wait for fish.")
    sid = session(engine, file_ids=[fid])
    full = " ".join(f"word{i}" for i in range(40))
    script(engine, {"content": full})
    for llm in both(engine):
        llm.chunk_delay_s = 0.1
    seen = []
    with httpx.stream("POST", f"{engine.base}/v1/sessions/{sid}/messages", timeout=30,
                      json={"content": "How do herons fish?", "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and '"text_chunk"' in line:
                seen.append(line)
                if len(seen) == 3:
                    break  # the client walks away mid-answer
    deadline = time.monotonic() + 15
    while True:
        history = engine.http.get(f"/v1/sessions/{sid}/messages").json()["data"]
        if len(history) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [m["role"] for m in history] == ["user", "assistant"], history
    reply = history[1]
    assert reply["metadata"]["truncated"] is True and "disconnected" in reply["metadata"]["interrupted"]
    assert reply["content"] and full.startswith(reply["content"]) and reply["content"] != full
    assert reply["metadata"]["generation_method"] == "llm"
