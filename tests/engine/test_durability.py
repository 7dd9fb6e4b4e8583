"""Durability: kill -9 the real ``ragengine serve`` mid-ingestion; every acknowledged write survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.support.server import free_port


def _start(data_dir: Path, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAGENGINE_SNAPSHOT_JOURNAL_BYTES": "20000"}
    cmd = [sys.executable, "-m", "ragengine.cli", "serve", "--port", str(port), "--data-dir", str(data_dir),
           "--log-level", "warning"]
    return subprocess.Popen(cmd, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def _wait_ready(base: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited during start-up"
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError("server not ready")


def test_kill_9_mid_ingestion_loses_no_acknowledged_write(tmp_path: Path):
    data_dir, log = tmp_path / "data", tmp_path / "server.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start(data_dir, port, log)
    acked: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()
    try:
        _wait_ready(base, proc)

        def writer(worker: int) -> None:
            # Small snapshot threshold (20 kB) so snapshots + journal resets happen during the run too.
            i = 0
            with httpx.Client(base_url=base, timeout=30) as client:
                while not stop.is_set():
                    docs = [{"doc_id": f"w{worker}-{i}-{k}", "text": f"Worker {worker} document {i}.{k} about zebra {i * 7 + k}.",
                             "metadata": {"worker": worker, "i": i}} for k in range(3)]
                    try:
                        resp = client.post("/index", json={"index_name": "durable", "documents": docs})
                    except httpx.HTTPError:
                        return
                    if resp.status_code == 200:
                        with lock:
                            for d in docs:
                                acked[d["doc_id"]] = d["text"]
                    i += 1

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(acked) < 90 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # mid-ingestion: writers are still sending
        proc.wait(10)
        stop.set()
        for t in threads:
            t.join(30)
        assert len(acked) >= 90, f"only {len(acked)} writes acknowledged before the kill"

        proc = _start(data_dir, port, log)
        _wait_ready(base, proc)
        listed: dict[str, str] = {}
        offset = 0
        while True:
            page = httpx.get(f"{base}/indexes/durable/documents",
                             params={"limit": 100, "offset": offset, "max_text_length": 10_000}).json()
            listed.update({d["doc_id"]: d["text"] for d in page["documents"]})
            offset += 100
            if offset >= page["total_items"]:
                break
        missing = [d for d in acked if d not in listed]
        assert not missing, f"{len(missing)} acknowledged documents lost, e.g. {missing[:5]}"
        assert all(listed[d] == t for d, t in acked.items())
        # ... and retrievable: a sample of acknowledged documents comes back for its own text.
        for doc_id in list(acked)[:: max(1, len(acked) // 10)]:
            hits = httpx.post(f"{base}/retrieve", json={"index_name": "durable", "query": acked[doc_id],
                                                         "max_node_count": 5}).json()["results"]
            assert doc_id in [h["doc_id"] for h in hits], doc_id
    finally:
        stop.set()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
