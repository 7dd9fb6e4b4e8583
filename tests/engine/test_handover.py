"""A FAISS engine replaced without a gap (ragengine/handover.py): the replacement starts beside the process
that holds the data folder, serves reads at once from a read-only load, holds writes, and takes the folder
over once the old process has stopped. Issue 48: a `helm upgrade` replaced the single engine pod and 24 of
246 requests were refused."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import signal
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from ragengine.access.routes import ROUTES, served_by_standby
from ragengine.app import create_app
from ragengine.index import disk
from ragengine.index.durability import Durability, load_stable
from ragengine.index.journal import Journal
from ragengine.index.snapshot import write_snapshot
from ragengine.index.state import IndexState
from ragengine.index.types import ChunkingConfig
from ragengine.settings import EngineSettings
from tests.support.engine_process import engine_process
from tests.support.service_client import ServiceClient

pytestmark = pytest.mark.stores("faiss")
DOCS = [{"doc_id": f"d{i}", "text": f"Document {i} is about the {word} migration season."}
        for i, word in enumerate(["zebra", "swallow", "salmon"])]


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and a hash of its bytes. SQLite's ``-shm`` is left out: the wal-index,
    shared memory in which every reader of the sessions' database (the old process's idle workers) writes
    its read marks; it holds no data."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith("-shm")}


def listed(base: str, index: str = "durable") -> set[str]:
    page = httpx.get(f"{base}/indexes/{index}/documents", params={"limit": 100}, timeout=30).json()
    return {d["doc_id"] for d in page["documents"]}


def wait_for_take_over(base: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while "handover" in httpx.get(f"{base}/health", timeout=10).json():
        assert time.monotonic() < deadline, "the stand-by never took the folder over"
        time.sleep(0.05)


def test_a_standby_serves_the_probes_and_what_only_reads_the_indexes(tmp_path: Path):
    """The rule (access.routes.served_by_standby) over the whole route table: what changes nothing and reads
    only the index folders; every write, and everything in the sessions' database, waits for the take-over."""
    served = {f"{m} {p}" for (m, p), rule in ROUTES.items() if served_by_standby(m, rule)}
    assert served == {
        "GET /health", "GET /ready", "GET /metrics",
        "GET /indexes", "GET /indexes/{index_name}/documents", "POST /retrieve",
        "GET /indexes/{index_name}/reindex", "GET /indexes/{index_name}/versions", "GET /indexes/{index_name}/export",
        "POST /v1/chat/completions", "GET /v1/models", "POST /v1/chat/reformulate",
        "GET /whoami", "GET /ui", "GET /ui/", "GET /ui/assets/{name}",  # the console: files, and who is signed in
    }
    paths = create_app(EngineSettings(data_dir=tmp_path)).openapi()["paths"]  # what it holds may answer 503
    assert "503" in paths["/index"]["post"]["responses"] and "503" in paths["/v1/sessions"]["get"]["responses"]
    assert "503" not in paths["/retrieve"]["post"]["responses"]


def test_a_standby_serves_reads_changes_no_byte_and_holds_writes(make_server, tmp_path: Path):
    data = tmp_path / "data"
    with contextlib.ExitStack() as old_engine:
        old, _ = old_engine.enter_context(make_server(session_ttl_s=0))  # the process being replaced, left idle
        assert httpx.post(f"{old}/index", json={"index_name": "durable", "documents": DOCS[:2]}, timeout=60).status_code == 200
        assert httpx.post(f"{old}/index", json={"index_name": "durable", "documents": DOCS[2:]}, timeout=60).status_code == 200
        journal = data / "indexes" / "durable" / "journal.log"
        assert journal.stat().st_size > 0  # the writes since its start are in the journal only
        with journal.open("ab") as fh:
            fh.write(b"RGJ1\x00")  # an append under way: a torn tail the stand-by must not truncate
        before = digest(data)

        with make_server(handover_wait_seconds=1) as (standby, app):
            health = httpx.get(f"{standby}/health", timeout=10).json()
            assert health["handover"]["role"] == "standby", health
            assert httpx.get(f"{standby}/ready", timeout=10).json()["ready"] is True  # a rolling update goes on
            assert httpx.get(f"{standby}/indexes", timeout=10).json() == ["durable"]
            assert listed(standby) == {"d0", "d1", "d2"}  # the snapshot and the journal as they stand
            hits = httpx.post(f"{standby}/retrieve", json={"index_name": "durable", "query": "salmon migration",
                                                            "max_node_count": 1}, timeout=30).json()["results"]
            assert hits[0]["doc_id"] == "d2"
            assert httpx.get(f"{standby}/indexes/durable/versions", timeout=10).status_code == 200
            assert httpx.get(f"{standby}/indexes/durable/export", timeout=30).status_code == 200

            start = time.monotonic()
            resp = httpx.post(f"{standby}/index", json={"index_name": "durable", "documents": [
                {"doc_id": "held", "text": "A write the stand-by holds past its bound."}]}, timeout=30)
            assert resp.status_code == 503, resp.text
            assert time.monotonic() - start >= 1.0
            assert resp.headers["retry-after"] == "5"
            assert "has not stopped within 1 s (handover_wait_seconds)" in resp.json()["detail"]
            assert "the request was not run" in resp.json()["detail"]
            # the sessions' database is the writer's too: its routes wait as well (OpenAI's error shape there)
            resp = httpx.get(f"{standby}/v1/sessions", timeout=30)
            assert resp.status_code == 503 and "handover_wait_seconds" in resp.json()["error"]["message"]

            assert digest(data) == before  # not a byte changed: no lock written, no tail cut, no trash, no db
            assert listed(old) == {"d0", "d1", "d2"}  # the refused write was never run

            read_only_copy = weakref.ref(app.state.registry)
            old_engine.close()  # the old process stops: its final snapshot, the lock given up
            wait_for_take_over(standby)
            gc.collect()
            assert read_only_copy() is None  # the stand-by's indexes left memory with its last read
            assert listed(standby) == {"d0", "d1", "d2"}
            resp = httpx.post(f"{standby}/index", json={"index_name": "durable", "documents": [
                {"doc_id": "after", "text": "Written by the new process once it took the folder over."}]}, timeout=60)
            assert resp.status_code == 200, resp.text
            assert listed(standby) == {"d0", "d1", "d2", "after"}
            assert not (data / "indexes" / "durable" / "journal.log").read_bytes().endswith(b"RGJ1\x00")


ADMIN, ALICE, BOB = "admin-key-0123456789abcdef", "alice-key-0123456789abcdef", "bob-key-0123456789abcdef"


def test_a_standby_refuses_a_role_at_once_and_leaves_ownership_to_the_writer(make_server, tmp_path: Path):
    """Access control's gate (access/enforce.py: authorization before the body, issue 41) in a stand-by: a role
    below the route's and a bad id are refused at once, not held; a held route's ownership needs the sessions'
    store, which only the writer opens, so it is decided after the take-over (an owner's 200, another's 404),
    never a 500 from a stand-by that has no store."""
    access = tmp_path / "access.yaml"
    access.write_text(json.dumps({"keys": [{"name": "alice", "key": ALICE, "indexes": ["*"], "role": "write"},
                                           {"name": "bob", "key": BOB, "indexes": ["*"], "role": "read",
                                            "limits": {"requestsPerMinute": 1000}}]}))
    alice, bob = ({"Authorization": f"Bearer {key}"} for key in (ALICE, BOB))
    keys = {"api_key": ADMIN, "access_file": access}
    with contextlib.ExitStack() as old_engine:
        old, _ = old_engine.enter_context(make_server(session_ttl_s=0, **keys))
        assert httpx.post(f"{old}/index", headers=alice, json={"index_name": "durable", "documents": DOCS},
                          timeout=60).status_code == 200
        session = httpx.post(f"{old}/v1/sessions", headers=alice, json={"index_name": "durable"}, timeout=30).json()["id"]
        with make_server(handover_wait_seconds=120, **keys) as (standby, _app):
            assert httpx.get(f"{standby}/health", timeout=10).json()["handover"]["role"] == "standby"
            start = time.monotonic()
            refused = httpx.post(f"{standby}/index", headers=bob, timeout=30, json={"index_name": "durable",
                                                                                   "documents": DOCS[:1]})
            assert refused.status_code == 403 and "this needs write" in refused.json()["detail"], refused.text
            malformed = httpx.get(f"{standby}/v1/sessions/{'s' * 65}", headers=alice, timeout=30)
            assert malformed.status_code == 400 and malformed.json()["error"]["param"] == "session_id", malformed.text
            assert time.monotonic() - start < 60  # neither waited for the take-over
            with ThreadPoolExecutor(2) as pool:
                mine, theirs = (pool.submit(httpx.get, f"{standby}/v1/sessions/{session}", headers=who, timeout=120)
                                for who in (alice, bob))
                while httpx.get(f"{standby}/health", timeout=10).json()["handover"]["held_requests"] < 2:
                    assert not (mine.done() or theirs.done()), (mine.result().text, theirs.result().text)
                    time.sleep(0.05)
                old_engine.close()  # the old process stops; the stand-by takes over and the held requests go on
                assert mine.result().status_code == 200, mine.result().text
                assert theirs.result().status_code == 404, theirs.result().text


def test_an_engine_replaced_under_load_fails_no_request_and_loses_no_write(make_server, tmp_path: Path):
    settings = {"shutdown_drain_seconds": "1"}  # the operator's drain is 5 s; as long as one request here
    with engine_process(tmp_path, settings=settings, llm=False) as old:
        assert httpx.post(f"{old.base_url}/index", json={"index_name": "durable", "documents": DOCS},
                          timeout=60).status_code == 200
        with engine_process(tmp_path, settings=settings, llm=False) as new:
            health = httpx.get(f"{new.base_url}/health", timeout=10).json()
            assert health["handover"]["role"] == "standby", health
            assert listed(new.base_url) == {"d0", "d1", "d2"}  # reads at once, from the old one's data
            with ServiceClient(old.base_url, new.base_url) as client:
                while client.counts["write"] < 6 and not client.failures:  # writes on both; the new one's held
                    time.sleep(0.05)
                client.old_stopping.set()
                time.sleep(0.2)  # requests already sent to the old one are in flight: it serves them while draining
                stopped = time.monotonic()
                old.process.send_signal(signal.SIGTERM)
                wait_for_take_over(new.base_url)
                took_over_s = time.monotonic() - stopped
                written = client.counts["write"]
                while client.counts["write"] < written + 4 and not client.failures:  # the new one writes on
                    time.sleep(0.05)
            assert old.process.wait(30) in (0, -signal.SIGTERM)
            assert not client.failures, client.failures[:5]
            held = [line for line in httpx.get(f"{new.base_url}/metrics", timeout=10).text.splitlines()
                    if line.startswith('ragengine_handover_held_requests_total{outcome="served"}')]
            assert held and float(held[0].split()[-1]) >= 1, held  # writes sent to it meanwhile waited, then succeeded
            print(f"\nhand-over: {took_over_s:.1f} s from SIGTERM to writes on the new engine; {client.counts}; "
                  f"the longest write took {client.longest_write_s:.1f} s")
            new.process.send_signal(signal.SIGKILL)  # acknowledged, then killed: its journal must have them
            new.process.wait(10)
    with make_server() as (again, _app):  # a restart on the same folder
        assert listed_all(again) >= client.acked | {"d0", "d1", "d2"}


def listed_all(base: str) -> set[str]:
    out: set[str] = set()
    offset = 0
    while True:
        page = httpx.get(f"{base}/indexes/durable/documents", params={"limit": 100, "offset": offset}, timeout=30).json()
        out |= {d["doc_id"] for d in page["documents"]}
        offset += 100
        if offset >= page["total_items"]:
            return out


STORE = {"hnsw_threshold": 10_000}


def add(durability: Durability, state: IndexState, doc_id: str):
    vector = np.random.default_rng(len(doc_id)).random((1, 4), dtype=np.float32)
    return durability.write(state, {"add": [{"id": doc_id, "text": doc_id, "meta": {}, "spans": [[0, len(doc_id)]]}]},
                            vector)


async def test_a_standby_reads_an_index_again_when_its_writer_swaps_a_snapshot_in_meanwhile(tmp_path: Path, monkeypatch):
    """The writer's snapshot puts a fresh journal in place: a stand-by that read the snapshot before it and the
    journal after it would miss every write in between. It sees the snapshot's sequence number change, and
    reads the index again."""
    writer = Durability(tmp_path, 4, STORE, 0, 10)
    state = IndexState("swapped", 4, ChunkingConfig(), STORE)
    await add(writer, state, "one")
    await writer.snapshot(state)
    await add(writer, state, "two")  # in the journal only
    folder = writer.dir("swapped")

    read = Journal.read
    swaps = []

    def read_after_a_swap(journal, repair=True):
        if not swaps:  # the writer snapshots (seq 2) and empties the journal between the two reads
            write_snapshot(state, folder / "snapshot")
            state.journal.reset()
            swaps.append(disk.snapshot_seq(folder))
        return read(Journal(journal.path, journal.dim), repair)  # the file as it is now: the new, empty journal

    monkeypatch.setattr(Journal, "read", read_after_a_swap)
    pauses = []
    loaded = load_stable(folder, STORE, pause=pauses.append)
    assert swaps == [2] and len(pauses) == 1  # read once more
    assert set(loaded.docs) == {"one", "two"} and loaded.seq == 2
