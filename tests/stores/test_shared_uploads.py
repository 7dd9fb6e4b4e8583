"""Uploads shared by replicas: two real ``ragengine serve`` processes on one PostgreSQL, holding both the
indexes (pgvector) and the sessions, as the operator deploys them (``database_url`` = the store's DSN).

A file accepted by one replica is ingested exactly once, by whichever replica's worker claims it, and
its status and content are served by both; ``kill -9`` of the replica holding an ingestion job leaves
the job ``processing`` (never lost) until its lease runs out, then the other replica takes it and
finishes it.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import psycopg
import pytest

from tests.support.engine_process import EngineProcess, engine_process

LEASE_S = 4  # short, so a dead replica's job is taken over quickly; long enough for a busy machine's heartbeat
_dbs = itertools.count()


@pytest.fixture(scope="module")
def database(pgvector_url) -> str:
    """A database of its own (sessions live in the public schema: other tests must not share it)."""
    name = f"uploads_{os.getpid()}_{next(_dbs)}"
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return pgvector_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="module")
def replicas(database, tmp_path_factory) -> Iterator[list[EngineProcess]]:
    """Two replicas for the module (starting one takes a while): the kill test, last, kills one of them."""
    settings = {"vector_store": "postgres", "vector_store_url": database, "database_url": database,
                "ingestion_lease_s": str(LEASE_S), "ingestion_poll_s": "0.2", "session_ttl_s": "0"}
    root = tmp_path_factory.mktemp("replicas")
    with ExitStack() as stack:
        yield [stack.enter_context(engine_process(root / name, settings=settings, llm=False)) for name in ("a", "b")]


def _upload(base: str, name: str, text: str) -> dict:
    r = httpx.post(f"{base}/v1/files", files={"file": (name, text.encode(), "text/plain")}, timeout=60)
    assert r.status_code == 202, r.text
    return r.json()


def _wait_done(base: str, file_id: str, timeout_s: float = 300) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = httpx.get(f"{base}/v1/files/{file_id}", timeout=30).json()
        if info["ingestion_status"] in ("completed", "failed"):
            return info
        assert info["ingestion_status"] in ("uploaded", "processing"), info
        time.sleep(0.1)
    raise AssertionError(f"{file_id} still {info['ingestion_status']} after {timeout_s} s")


def _job(database: str, file_id: str) -> tuple[str, str | None, int, bool]:
    """(status, lease owner, attempts, bytes still stored) straight from the shared database."""
    with psycopg.connect(database) as conn:
        status, owner, attempts = conn.execute(
            "SELECT status, lease_owner, attempts FROM conv_files WHERE id = %s", (file_id,)).fetchone()
        blob = conn.execute("SELECT count(*) FROM conv_file_blobs WHERE file_id = %s", (file_id,)).fetchone()[0]
    return status, owner, attempts, bool(blob)


def _completed_count(base: str) -> float:
    """This process's own count of files it ingested to completion (its /metrics)."""
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        if line.startswith('ragengine_conversation_files_total{status="completed"}'):
            return float(line.split()[-1])
    return 0.0


def _file_docs(base: str, file_id: str) -> list[str]:
    """The ids of the file's documents in the conversation index, as listed (a duplicate would show twice)."""
    ids: list[str] = []
    while True:
        page = httpx.get(f"{base}/indexes/conversations/documents", timeout=60,
                         params={"limit": 100, "offset": len(ids), "metadata_filter": json.dumps({"file_id": file_id})})
        body = page.json()
        ids += [d["doc_id"] for d in body["documents"]]
        if not body["documents"] or len(ids) >= body["total_items"]:
            return ids


def _notes(topic: str, parts: int) -> str:
    """Text the engine splits into ``parts`` parts of about 8,000 characters (uploads.PART_CHARS)."""
    para = " ".join(f"The {topic} runbook, step {{i}}.{k}: check the {topic} gauge and write down reading {k}."
                    for k in range(40))
    return "\n\n".join(para.replace("{i}", str(i)) for i in range(parts * 2))


def test_upload_through_one_replica_is_ingested_once_and_served_by_both(replicas, database):
    a, b = replicas
    files = [_upload(a.base_url, f"{topic}.txt", _notes(topic, 2))
             for topic in ("boiler", "turbine", "condenser", "pump", "valve", "chiller")]
    seen = httpx.get(f"{b.base_url}/v1/files/{files[0]['file_id']}", timeout=30).json()
    assert seen["filename"] == "boiler.txt"  # B knows the upload at once, whatever its state
    for f in files:
        info = _wait_done(b.base_url, f["file_id"])
        assert (info["ingestion_status"], info["documents"]) == ("completed", 2), info
        status, _owner, attempts, blob = _job(database, f["file_id"])
        assert (status, attempts, blob) == ("completed", 1, False)  # one claim, the bytes gone with the job
        assert len(_file_docs(b.base_url, f["file_id"])) == 2
    # Each replica counts what it ingested itself: together, every file exactly once.
    assert _completed_count(a.base_url) + _completed_count(b.base_url) == len(files)

    session = httpx.post(f"{b.base_url}/v1/sessions", json={"file_ids": [files[1]["file_id"]]}, timeout=30).json()
    reply = httpx.post(f"{b.base_url}/v1/sessions/{session['session_id']}/messages",
                       json={"content": "What should I check in the turbine runbook?"}, timeout=120).json()
    meta = reply["assistant_message"]["metadata"]
    assert meta["sources"] and {s["metadata"]["file_id"] for s in meta["sources"]} == {files[1]["file_id"]}
    assert "turbine gauge" in reply["assistant_message"]["content"]


def test_kill_9_of_the_replica_holding_a_job_lets_the_other_finish_it(replicas, database):
    a, b = replicas
    by_pid = {a.pid: a, b.pid: b}
    parts = 24  # a few seconds of embedding: the kill lands while the job is held
    before = {p.pid: _completed_count(p.base_url) for p in replicas}
    file_id = _upload(a.base_url, "plant.txt", _notes("plant", parts))["file_id"]
    deadline = time.monotonic() + 120
    while True:
        status, owner, attempts, _ = _job(database, file_id)
        if status == "processing" and owner:
            break
        assert status == "uploaded" and time.monotonic() < deadline, (status, owner)
        time.sleep(0.02)
    holder = by_pid[int(owner.split("/")[1])]
    survivor = b if holder is a else a
    os.kill(holder.pid, signal.SIGKILL)
    assert _job(database, file_id)[0] == "processing", "the job ended before the kill: make the file larger"

    info = httpx.get(f"{survivor.base_url}/v1/files/{file_id}", timeout=30).json()
    assert info["ingestion_status"] == "processing"  # the dead replica's job is not lost, only waiting
    info = _wait_done(survivor.base_url, file_id)
    assert (info["ingestion_status"], info["documents"]) == ("completed", parts), info
    status, owner, attempts, blob = _job(database, file_id)
    assert (status, attempts, blob) == ("completed", 2, False)
    assert int(owner.split("/")[1]) == survivor.pid
    docs = _file_docs(survivor.base_url, file_id)
    assert sorted(docs) == sorted(f"{file_id}-{i}" for i in range(parts))  # replaced, never duplicated
    assert _completed_count(survivor.base_url) == before[survivor.pid] + 1
