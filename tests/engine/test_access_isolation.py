"""Document ACLs, sessions and uploads keep two teams apart on one engine, on every vector store.

Two readers of the same index, ``ops`` (group ops) and ``dev`` (group dev), ask the same question. Every
document carries a marker word; a document a principal may not see must never show up for it: not in any
position of ``/retrieve`` (top-k far above the index's size, so nothing hides behind the cut), not in the
listing, not in a chat completion's sources or in any prompt the engine sends the LLM (chat, ``rag:``
alias, streamed or not), not in a session's answer, sources or history, not through a tool call. Sessions
and uploads of one are 404 to the other. Malformed ACLs hide their document from both (an admin sees it).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import httpx
import pytest

from tests.conversations.conftest import fresh_database
from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app, tool_call
from tests.support.embedding import serve_engine
from tests.support.server import serve_app
from tests.support.stores import store_values

ADMIN, OPS, DEV = "admin-0123456789abcdef", "ops-key-0123456789abcdef", "dev-key-0123456789abcdef"
ACCESS = {"keys": [
    {"name": "ops", "key": OPS, "indexes": ["kb"], "role": "read", "groups": ["ops"]},
    {"name": "dev", "key": DEV, "indexes": ["kb"], "role": "read", "groups": ["dev"]},
]}
QUESTION = "How do I restart the cooling pump?"
# doc_id -> (marker, acl or a sentinel for "no acl")
NO_ACL = object()
DOCS = {
    "ops-a": ("OPSALPHA", ["group:ops"]),
    "ops-b": ("OPSBRAVO", ["group:ops"]),
    "dev-a": ("DEVALPHA", ["group:dev"]),
    "dev-b": ("DEVBRAVO", ["group:dev"]),
    "both": ("BOTHTEAMS", ["group:ops", "group:dev"]),
    "dev-user": ("DEVUSERONLY", ["user:dev"]),
    "shared": ("SHAREDALL", NO_ACL),
    "bad-string": ("BROKENSTRING", "group:ops"),
    "bad-entry": ("BROKENENTRY", ["group:ops", 5]),
    "bad-prefix": ("BROKENPREFIX", ["team:ops"]),
    "nobody": ("NOBODYATALL", []),
}
SEES = {
    "ops": {"OPSALPHA", "OPSBRAVO", "BOTHTEAMS", "SHAREDALL"},
    "dev": {"DEVALPHA", "DEVBRAVO", "BOTHTEAMS", "DEVUSERONLY", "SHAREDALL"},
    "admin": {marker for marker, _ in DOCS.values()},
}
MARKERS = SEES["admin"]
KEYS = {"ops": OPS, "dev": DEV, "admin": ADMIN}


def _doc(doc_id: str) -> dict:
    marker, acl = DOCS[doc_id]
    text = (f"To restart the cooling pump, open valve {marker} first, then press the green button and wait "
            f"for the pressure to settle. Reference code {marker}.")
    return {"doc_id": doc_id, "text": text, "metadata": {} if acl is NO_ACL else {"acl": acl}}


def _found(text: str) -> set[str]:
    return {m for m in MARKERS if m in text}


class Engine:
    def __init__(self, base: str, llm: ScriptedLLM) -> None:
        self.base, self.llm = base, llm

    def as_(self, who: str) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=120, headers={"Authorization": f"Bearer {KEYS[who]}"})


@pytest.fixture(scope="module")
def llm():
    scripted = ScriptedLLM(model="scripted")
    with serve_app(create_scripted_app(scripted)) as base:
        scripted.base = base + "/v1"  # type: ignore[attr-defined]
        yield scripted


@pytest.fixture(scope="module")
def engines(llm, embedder, tmp_path_factory, request):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    running: dict[str, Engine] = {}
    with contextlib.ExitStack() as stack:
        def get(store: str) -> Engine:
            if store in running:
                return running[store]
            work = Path(tmp_path_factory.mktemp(f"isolation-{store}"))
            (work / "access.yaml").write_text(json.dumps(ACCESS))
            values = store_values(store, prefix=f"iso{os.getpid()}", work_dir=work,
                                  pg_url=lambda: request.getfixturevalue("pgvector_url"))
            if store == "postgres":  # sessions, uploads and their owners in PostgreSQL too, as the operator deploys it
                values["database_url"] = fresh_database(values["vector_store_url"])
            settings = EngineSettings(api_key=ADMIN, access_file=work / "access.yaml", data_dir=work / "data",
                                      llm_url=llm.base, llm_retries=0, similarity_threshold=0.0, session_ttl_s=0,
                                      **values)
            app = create_app(settings)
            base = stack.enter_context(serve_engine(app, embedder))
            eng = running[store] = Engine(base, llm)
            with eng.as_("admin") as admin:
                r = admin.post("/index", json={"index_name": "kb", "documents": [_doc(d) for d in DOCS]})
                assert r.status_code == 200, r.text
            return eng

        yield get


@pytest.fixture
def engine(engines, vector_store, llm) -> Engine:
    llm.reset()
    return engines(vector_store)


def _prompts(llm: ScriptedLLM) -> str:
    return json.dumps(llm.chats())


@pytest.mark.parametrize("who", ["ops", "dev", "admin"])
def test_retrieval_and_listing_show_exactly_the_visible_documents(engine, who):
    with engine.as_(who) as c:
        hits = c.post("/retrieve", json={"index_name": "kb", "query": QUESTION, "max_node_count": 100}).json()
        assert {m for h in hits["results"] for m in _found(h["text"])} == SEES[who]
        for flt in ({"type": "eq", "key": "acl", "value": "group:dev"}, {"type": "ne", "key": "acl", "value": "x"}):
            # a client's own filter on the acl key cannot widen what the ACL lets through
            hits = c.post("/retrieve", json={"index_name": "kb", "query": QUESTION, "max_node_count": 100,
                                             "filters": flt}).json()
            assert {m for h in hits["results"] for m in _found(h["text"])} <= SEES[who]
        page = c.get("/indexes/kb/documents", params={"limit": 100, "max_text_length": 10_000}).json()
        assert {m for d in page["documents"] for m in _found(d["text"])} == SEES[who]
        assert page["total_items"] == len(SEES[who])


@pytest.mark.parametrize("who", ["ops", "dev"])
@pytest.mark.parametrize("stream", [False, True])
def test_chat_context_and_sources_hold_only_visible_documents(engine, who, stream):
    with engine.as_(who) as c:
        for ask in ({"index_name": "kb"}, {"model": "rag:kb"}):
            r = c.post("/v1/chat/completions", json={**ask, "stream": stream,
                                                      "messages": [{"role": "user", "content": QUESTION}]})
            assert r.status_code == 200, r.text
            assert _found(r.text) <= SEES[who], r.text  # sources (and the answer) in the body or the events
    prompts = _prompts(engine.llm)
    assert engine.llm.chats() and _found(prompts) <= SEES[who]
    assert len(_found(prompts)) >= 3  # the context was not simply empty: the visible documents fill it


def _upload(c: httpx.Client, name: str, text: str) -> str:
    r = c.post("/v1/files", files={"file": (name, text.encode(), "text/plain")})
    assert r.status_code == 202, r.text
    fid = r.json()["id"]
    deadline = time.monotonic() + 120
    while (status := c.get(f"/v1/files/{fid}").json()["ingestion_status"]) not in ("completed", "failed"):  # status: OpenAI's
        assert time.monotonic() < deadline, "ingestion did not finish"
        time.sleep(0.1)
    assert status == "completed"
    return fid


def test_sessions_uploads_and_tool_calls_stay_with_their_owner(engine):
    llm = engine.llm
    with engine.as_("ops") as ops, engine.as_("dev") as dev, engine.as_("admin") as admin:
        ops_file = _upload(ops, "ops.txt", "Ops pump notes: the cooling pump restarts with OPSFILENOTE held down.")
        dev_file = _upload(dev, "dev.txt", "Dev pump notes: the cooling pump restarts with DEVFILENOTE held down.")
        ops_s = ops.post("/v1/sessions", json={"index_name": "kb", "file_ids": [ops_file]}).json()["id"]
        dev_s = dev.post("/v1/sessions", json={"index_name": "kb", "file_ids": [dev_file]}).json()["id"]

        # the other's session, upload and attachments are "missing", whatever the route
        for c, other_s, other_f in ((dev, ops_s, ops_file), (ops, dev_s, dev_file)):
            for method, path in (("GET", f"/v1/sessions/{other_s}"), ("GET", f"/v1/sessions/{other_s}/messages"),
                                 ("GET", f"/v1/sessions/{other_s}/files"), ("DELETE", f"/v1/sessions/{other_s}"),
                                 ("GET", f"/v1/sessions/{other_s}/threads"), ("GET", f"/v1/files/{other_f}"),
                                 ("DELETE", f"/v1/files/{other_f}")):
                r = c.request(method, path)
                assert r.status_code == 404, (method, path, r.text)
            r = c.post(f"/v1/sessions/{other_s}/messages", json={"content": QUESTION})
            assert r.status_code == 404
            own_s = ops_s if c is ops else dev_s
            assert c.post(f"/v1/sessions/{own_s}/files", json={"file_ids": [other_f]}).status_code == 404
            assert c.post("/v1/sessions", json={"file_ids": [other_f]}).status_code == 404
            assert c.post(f"/v1/sessions/{own_s}/messages", json={"content": "hi", "file_ids": [other_f]}).status_code == 404
            r = c.post("/v1/files", data={"session_id": other_s}, files={"file": ("x.txt", b"x", "text/plain")})
            assert r.status_code == 404
        assert [s["id"] for s in ops.get("/v1/sessions").json()["data"]] == [ops_s]
        assert [f["id"] for f in dev.get("/v1/files").json()["data"]] == [dev_file]
        assert {ops_s, dev_s} <= {s["id"] for s in admin.get("/v1/sessions").json()["data"]}  # admin: everyone's
        assert admin.get(f"/v1/sessions/{ops_s}").status_code == 200

        for c, who, own_s, note in ((ops, "ops", ops_s, "OPSFILENOTE"), (dev, "dev", dev_s, "DEVFILENOTE")):
            llm.reset()
            r = c.post(f"/v1/sessions/{own_s}/messages", json={"content": QUESTION, "mode": "rag", "top_k": 20})
            assert r.status_code == 200, r.text
            sources = r.json()["assistant_message"]["metadata"]["sources"]
            assert {m for s in sources for m in _found(json.dumps(s))} <= SEES[who]
            llm.script.append({"tool_calls": [tool_call(QUESTION, top_k=20)]})
            r = c.post(f"/v1/sessions/{own_s}/messages", json={"content": QUESTION, "mode": "tools"})
            assert r.status_code == 200, r.text
            calls = r.json()["assistant_message"]["metadata"]["tool_calls"]
            assert calls and calls[0]["results"] >= 1
            prompts = _prompts(llm)
            assert _found(prompts) <= SEES[who] and note in prompts  # its own file came back from the tool
            assert ("DEVFILENOTE" if who == "ops" else "OPSFILENOTE") not in prompts
            history = c.get(f"/v1/sessions/{own_s}/messages").text
            assert _found(history) <= SEES[who]
            assert ("DEVFILENOTE" if who == "ops" else "OPSFILENOTE") not in history
