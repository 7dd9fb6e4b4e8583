"""Uploads shared by replicas: two real ``ragengine serve`` processes on one PostgreSQL, holding both the
indexes (pgvector) and the sessions, as the operator deploys them (``database_url`` = the store's DSN).

A file accepted by one replica is ingested exactly once, by whichever replica's worker claims it, and
its status and content are served by both; ``kill -9`` of the replica holding an ingestion job leaves
the job ``processing`` (never lost) until its lease runs out, then the other replica takes it and
finishes it.

The kill lands mid-job by construction, not by timing: the test holds a lock on the store's ``indexes``
table, which every document write takes, so the job's holder blocks in its first write; the test waits
until PostgreSQL shows that backend waiting for the lock, kills the replica, then lets go. The replicas
are shared by the module and a killed one is started again for the next test, in any order.
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


class Replicas:
    """Two replicas for the module (starting one takes a while); one killed by a test is started again,
    in its own folder, when the next test asks for them."""

    def __init__(self, root, settings: dict[str, str]) -> None:
        self.root, self.settings = root, settings
        self.running: dict[str, tuple[ExitStack, EngineProcess]] = {}

    def get(self) -> list[EngineProcess]:
        for name in ("a", "b"):
            if name in self.running and self.running[name][1].process.poll() is not None:
                self.running.pop(name)[0].close()  # killed: stop what is left, then start it again
            if name not in self.running:
                stack = ExitStack()
                self.running[name] = stack, stack.enter_context(
                    engine_process(self.root / name, settings=self.settings, llm=False))
        return [self.running[name][1] for name in ("a", "b")]

    def close(self) -> None:
        for stack, _ in self.running.values():
            stack.close()


@pytest.fixture(scope="module")
def pool(database, tmp_path_factory) -> Iterator[Replicas]:
    settings = {"vector_store": "postgres", "vector_store_url": database, "database_url": database,
                "ingestion_lease_s": str(LEASE_S), "ingestion_poll_s": "0.2", "session_ttl_s": "0"}
    replicas = Replicas(tmp_path_factory.mktemp("replicas"), settings)
    try:
        yield replicas
    finally:
        replicas.close()


@pytest.fixture
def replicas(pool) -> list[EngineProcess]:
    return pool.get()


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
    before = _completed_count(a.base_url) + _completed_count(b.base_url)  # the replicas may have served a test
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
    assert _completed_count(a.base_url) + _completed_count(b.base_url) - before == len(files)

    session = httpx.post(f"{b.base_url}/v1/sessions", json={"file_ids": [files[1]["file_id"]]}, timeout=30).json()
    reply = httpx.post(f"{b.base_url}/v1/sessions/{session['session_id']}/messages",
                       json={"content": "What should I check in the turbine runbook?"}, timeout=120).json()
    meta = reply["assistant_message"]["metadata"]
    assert meta["sources"] and {s["metadata"]["file_id"] for s in meta["sources"]} == {files[1]["file_id"]}
    assert "turbine gauge" in reply["assistant_message"]["content"]


def _store_schema(database: str) -> str:
    with psycopg.connect(database) as conn:
        (schema,) = conn.execute("SELECT table_schema FROM information_schema.tables WHERE table_name = 'indexes' "
                                 "AND table_schema <> 'public'").fetchone()
    return schema


def _waiting_on(conn: psycopg.Connection, table: str) -> int:
    """Backends waiting for a lock on ``table`` (a qualified name)."""
    (n,) = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                        (table,)).fetchone()
    return n


def _wait(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.02)
    return value


def test_kill_9_of_the_replica_holding_a_job_lets_the_other_finish_it(replicas, database):
    a, b = replicas
    by_pid = {a.pid: a, b.pid: b}
    parts = 3
    before = {p.pid: _completed_count(p.base_url) for p in replicas}
    table = f'"{_store_schema(database)}".indexes'
    with psycopg.connect(database) as lock, psycopg.connect(database, autocommit=True) as watch:
        lock.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")  # reads go on; every document write waits
        file_id = _upload(a.base_url, "plant.txt", _notes("plant", parts))["file_id"]
        _wait(lambda: _job(database, file_id)[0] == "processing", 120, "a replica to claim the job")
        _wait(lambda: _waiting_on(watch, table), 120, "the job's first write to wait for the lock")
        status, owner, attempts, _ = _job(database, file_id)
        holder = by_pid[int(owner.split("/")[1])]
        survivor = b if holder is a else a
        os.kill(holder.pid, signal.SIGKILL)
        holder.process.wait(30)
        assert (status, attempts) == ("processing", 1) and _job(database, file_id)[0] == "processing"
        lock.rollback()  # let go: the dead replica's half-sent write is rolled back with its connection

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
