"""A FAISS engine replaced without a gap (ragengine/handover.py): the replacement starts beside the process
that holds the data folder, serves reads at once from a read-only load, holds writes, and takes the folder
over once the old process has stopped. Issue 48: a `helm upgrade` replaced the single engine pod and 24 of
246 requests were refused."""

from __future__ import annotations

import contextlib
import hashlib
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.engine_process import engine_process

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

        with make_server(handover_wait_seconds=1) as (standby, _app):
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

            old_engine.close()  # the old process stops: its final snapshot, the lock given up
            wait_for_take_over(standby)
            assert listed(standby) == {"d0", "d1", "d2"}
            resp = httpx.post(f"{standby}/index", json={"index_name": "durable", "documents": [
                {"doc_id": "after", "text": "Written by the new process once it took the folder over."}]}, timeout=60)
            assert resp.status_code == 200, resp.text
            assert listed(standby) == {"d0", "d1", "d2", "after"}
            assert not (data / "indexes" / "durable" / "journal.log").read_bytes().endswith(b"RGJ1\x00")


class Client:
    """Clients that query and write without pause, as through a Service: each request to the old engine or
    the new one by turns, reads and writes by turns, and only to the new one once the old is told to stop
    (the endpoints controller takes a stopping pod out of the Service first: the preStop sleep waits for it)."""

    def __init__(self, old: str, new: str, workers: int = 3) -> None:
        self.old, self.new = old, new
        self.old_stopping = threading.Event()
        self.stop = threading.Event()
        self.acked: set[str] = set()
        self.failures: list[str] = []
        self.counts = {"read": 0, "write": 0}
        self.longest_write_s = 0.0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(w,)) for w in range(workers)]

    def __enter__(self) -> Client:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(180)

    def _run(self, worker: int) -> None:
        i = 0
        with httpx.Client(timeout=180) as http:
            while not self.stop.is_set():
                base = self.new if self.old_stopping.is_set() or (i + worker) % 2 else self.old
                doc_id = f"w{worker}-{i}"
                start = time.monotonic()
                try:
                    if i % 2:
                        resp = http.post(f"{base}/index", json={"index_name": "durable", "documents": [
                            {"doc_id": doc_id, "text": f"Worker {worker} wrote document {i} about otters."}]})
                    else:
                        resp = http.post(f"{base}/retrieve", json={"index_name": "durable", "query": "otters",
                                                                    "max_node_count": 3})
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.failures.append(f"{base} {type(exc).__name__}: {exc}")
                    i += 1
                    continue
                with self._lock:
                    if resp.status_code != 200:
                        self.failures.append(f"{base} {resp.status_code}: {resp.text[:300]}")
                    elif i % 2:
                        self.acked.add(doc_id)
                        self.longest_write_s = max(self.longest_write_s, time.monotonic() - start)
                    self.counts["write" if i % 2 else "read"] += 1
                i += 1


def test_an_engine_replaced_under_load_fails_no_request_and_loses_no_write(make_server, tmp_path: Path):
    settings = {"shutdown_drain_seconds": "1"}  # the operator's drain is 5 s; as long as one request here
    with engine_process(tmp_path, settings=settings, llm=False) as old:
        assert httpx.post(f"{old.base_url}/index", json={"index_name": "durable", "documents": DOCS},
                          timeout=60).status_code == 200
        with engine_process(tmp_path, settings=settings, llm=False) as new:
            health = httpx.get(f"{new.base_url}/health", timeout=10).json()
            assert health["handover"]["role"] == "standby", health
            assert listed(new.base_url) == {"d0", "d1", "d2"}  # reads at once, from the old one's data
            with Client(old.base_url, new.base_url) as client:
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
