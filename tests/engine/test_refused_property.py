"""A refused request changes nothing (issue 47): a property over every mutating route, on each store.

The routes come from the app's own route table (``api_routes``): every route that is not a GET and not one
of the searches in ``READ_ONLY``. Each needs a generator (``tests/support/refused_routes.py`` and
``refused_v1_routes.py``); a new mutating route without one fails ``test_every_mutating_route_has_a_generator``.

The engine runs with access control (an admin key, a writer and a reader; docs/access.md) over a seeded
world: an index with a live and a retired version, a second index, ``/persist`` copies good and damaged,
uploads (one whose text could not be read), a session with a message, a branch and a file, a vector store
with a file and a batch, a stored response. Every request generated carries exactly one fault (its kinds:
``tests/support/refusals.py``). For each: the answer is a 4xx, and what the engine holds
(``tests/support/holdings.py``: every physical index of the store, every version and hidden index included,
document by document with its digest, chunks and vectors; the version books; every row of the session
database; the /persist copies) is the same as before. What the API shows of every index (its export,
versions and document list) is compared over the whole run as well.

``REFUSED_EXAMPLES`` (default 1) is the number of examples Hypothesis draws per route and fault; a longer
run: ``REFUSED_EXAMPLES=20 pytest tests/engine/test_refused_property.py --timeout 0`` (about 20 times as long).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import psycopg
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings

from ragengine.app import create_app
from ragengine.settings import EngineSettings
from tests.support.holdings import differences, holdings
from tests.support.refusals import Route, World, faults
from tests.support.refused_routes import (
    READ_ONLY,
    conversation_routes,
    evaluation_routes,
    index_routes,
    version_routes,
)
from tests.support.refused_v1_routes import response_routes, vector_store_routes
from tests.support.routes import operations
from tests.support.versions import wait_job

EXAMPLES = int(os.environ.get("REFUSED_EXAMPLES", "1"))
KEYS = {"admin": "admin-key-0123456789abcdef", "writer": "writer-key-0123456789abcdef",
        "reader": "reader-key-0123456789abcdef", "stranger": "stranger-key-0123456789abcdef"}
ADMIN = {"Authorization": f"Bearer {KEYS['admin']}"}
LIMITS = {"body": 64 * 1024, "import": 256 * 1024, "upload": 32 * 1024, "document": 4000}
ROUTE_SPECS: dict[tuple[str, str], Route] = {**index_routes(), **version_routes(), **evaluation_routes(),
                                             **conversation_routes(), **vector_store_routes(), **response_routes()}
# Sessions, uploads, threads and messages live in the session database (SQLite, or PostgreSQL with the
# postgres store), not in the vector store: Milvus Lite's run (SQLite, as FAISS's) leaves them out.
SESSION_DATABASE_ROUTES = frozenset(conversation_routes())
DOCS = [{"doc_id": f"k{i}", "text": f"Note {i}: FAISS searches unit vectors; pier {i} has a ferry at {i + 8}:00.",
         "metadata": {"i": i}} for i in range(5)]


def mutating(app) -> set[tuple[str, str]]:
    return {op for op in operations(app) if op[0] != "get" and op not in READ_ONLY}


def test_every_mutating_route_has_a_generator(tmp_path):
    app = create_app(EngineSettings(data_dir=tmp_path))  # builds the routes; starts nothing
    routes = mutating(app)
    assert routes - set(ROUTE_SPECS) == set(), "mutating routes without a generator in tests/support/refused_*routes.py"
    assert set(ROUTE_SPECS) - routes == set(), "generators of routes the engine no longer has"


def _engine_settings(vector_store: str, work: Path, request) -> dict:
    access = work / "access.yaml"
    access.write_text(json.dumps({"keys": [
        {"name": "writer", "key": KEYS["writer"], "indexes": ["*"], "role": "write"},
        {"name": "reader", "key": KEYS["reader"], "indexes": ["*"], "role": "read"}]}))
    values = {"api_key": KEYS["admin"], "access_file": access, "max_body_bytes": LIMITS["body"],
              "max_import_bytes": LIMITS["import"], "max_upload_bytes": LIMITS["upload"],
              "max_document_chars": LIMITS["document"], "reindex_on_model_change": False}
    if vector_store == "postgres":  # the session database in PostgreSQL too (ids with a NUL reach it)
        admin_url = request.getfixturevalue("pgvector_url")
        name = f"refused_{os.getpid()}_{time.monotonic_ns()}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        values["database_url"] = admin_url.rsplit("/", 1)[0] + f"/{name}"
    return values


def _ok(resp: httpx.Response, status: int = 200) -> dict:
    assert resp.status_code == status, resp.text
    return resp.json()


def _wait_files(client: httpx.Client, store: str) -> None:
    deadline = time.monotonic() + 180
    while True:
        files = _ok(client.get("/v1/files"))["data"]
        attached = _ok(client.get(f"/v1/vector_stores/{store}/files"))["data"]
        if all(f["status"] in ("processed", "completed", "failed", "error") for f in files) and \
                all(f["status"] in ("completed", "failed") for f in attached):
            return
        assert time.monotonic() < deadline, (files, attached)
        time.sleep(0.1)


def seed(base: str, data_dir: Path, kind: str) -> World:
    client = httpx.Client(base_url=base, headers=ADMIN, timeout=180)
    _ok(client.post("/index", json={"index_name": "kb", "documents": DOCS}))
    _ok(client.post("/index", json={"index_name": "other", "documents": DOCS[:2]}))
    _ok(client.post("/indexes/kb/reindex", json={"chunking": {"chunk_size": 128}}), 202)
    versions = wait_job(base, "kb", headers=ADMIN)
    export = client.get("/indexes/kb/export").content
    copies = {"good": "good-copy", "damaged": "damaged-copy", "notacopy": "notacopy"}
    if kind == "faiss":
        for path in ("good-copy", "damaged-copy"):
            _ok(client.post("/persist/kb", params={"path": path}))
        manifest = data_dir / "persist" / "damaged-copy" / "manifest.json"
        manifest.write_text(manifest.read_text()[:-10])
        (data_dir / "persist" / "notacopy").mkdir()
        (data_dir / "persist" / "notacopy" / "mine.txt").write_text("not an index")

    def upload(name: str, data: bytes, kind_: str) -> str:
        return _ok(client.post("/v1/files", files={"file": (name, data, kind_)}, data={"purpose": "assistants"}), 202)["id"]

    file = upload("notes.md", b"# Notes\n\nBM25 ranks keywords; FAISS searches vectors.", "text/markdown")
    failed = upload("broken.pdf", b"%PDF-1.4 this is not a PDF at all", "application/pdf")
    store_file = upload("faiss.md", b"FAISS searches unit vectors by inner product.", "text/markdown")
    session = _ok(client.post("/v1/sessions", json={"title": "seeded", "index_name": "kb", "file_ids": [file]}), 201)["id"]
    message = _ok(client.post(f"/v1/sessions/{session}/messages", json={"content": "What does FAISS search?"}))
    thread = _ok(client.post(f"/v1/sessions/{session}/threads", json={
        "parent_message_id": message["user_message"]["id"], "new_thread_id": "branch"}), 201)["id"]
    _ok(client.post("/v1/vector_stores", json={"name": "A", "index_name": "store-a", "file_ids": [store_file]}))
    batch = _ok(client.post("/v1/vector_stores/store-a/file_batches", json={"file_ids": [file]}))["id"]
    _wait_files(client, "store-a")
    response = _ok(client.post("/v1/responses", json={"input": "What does FAISS search?", "tools": [
        {"type": "file_search", "vector_store_ids": ["store-a"]}]}))["id"]
    return World(index="kb", other="other", live=versions["live_version"],
                 retired=min(v["version"] for v in versions["versions"] if v["state"] == "retired"),
                 doc_ids=tuple(d["doc_id"] for d in DOCS), export=export, copies=copies, file=file, failed_file=failed,
                 store="store-a", store_file=store_file, batch=batch, session=session,
                 message=message["user_message"]["id"], thread=thread, response=response, limits=LIMITS)


class Run:
    """The requests sent and what went wrong; after a change, the next requests compare with the new state, so
    one run reports every fault that changed something.

    ``per_request``: what the engine holds is read again after every request (FAISS, PostgreSQL), or after each
    route's requests (Milvus Lite, where one read is 52 gRPC calls: 179 reads were most of a two-minute test).
    Either way every request is covered; a change found after a route's requests names all of them."""

    def __init__(self, base: str, app, *, per_request: bool = True) -> None:
        self.base, self.app, self.per_request = base, app, per_request
        self.held = holdings(base, ADMIN, app, listed=False)
        self.statuses: list[int] = []
        self.failures: list[str] = []
        self.unchecked: list[str] = []  # requests sent since what the engine holds was last compared

    def check(self, key: tuple[str, str], fault: str, strategy) -> None:
        @hypothesis_settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
                             suppress_health_check=list(HealthCheck))
        @given(call=strategy)
        def refused(call) -> None:
            resp = call.send(self.base, KEYS)
            self.statuses.append(resp.status_code)
            what = f"{key[0].upper()} {key[1]} with {fault}: {call.describe()} -> {resp.status_code} {resp.text[:300]}"
            if not 400 <= resp.status_code < 500:
                self.failures.append(what)
            self.unchecked.append(what)
            if self.per_request:
                self.compare()

        refused()

    def compare(self) -> None:
        """Compare what the engine holds with the last read; a change is blamed on the requests sent since."""
        if not self.unchecked:
            return
        now = holdings(self.base, ADMIN, self.app, listed=False)
        changed = differences(self.held, now)
        if changed:
            self.failures.append("\n".join(self.unchecked) + f"\n    changed: {changed}")
            self.held = now
        self.unchecked = []


def test_a_refused_request_changes_nothing(make_server, vector_store, tmp_path, request):
    with make_server(**_engine_settings(vector_store, tmp_path, request)) as (base, app):
        world = seed(base, tmp_path / "data", vector_store)
        routes = mutating(app)
        assert routes <= set(ROUTE_SPECS), f"no generator for {sorted(routes - set(ROUTE_SPECS))}"
        everything = holdings(base, ADMIN, app)
        run = Run(base, app, per_request=vector_store != "milvus")
        checked = sorted(routes if vector_store != "milvus" else routes - SESSION_DATABASE_ROUTES)
        for key in checked:
            for fault, strategy in faults(key, ROUTE_SPECS[key], world).items():
                run.check(key, fault, strategy)
            run.compare()  # (nothing left to compare if compared after each request)
        print(f"{vector_store}: {len(checked)} of {len(routes)} mutating routes, {len(run.statuses)} requests with a fault")
        assert not run.failures, "\n".join(run.failures)
        assert differences(everything, holdings(base, ADMIN, app)) == []  # the API's lists too
        assert len(run.statuses) >= 3 * len(checked)
