"""Clients that query and write one FAISS index through two engines as a Service would during a pod's
replacement (tests/engine/test_handover.py, bench/bench_handover.py)."""

from __future__ import annotations

import threading
import time

import httpx


class ServiceClient:
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
        self.writes: list[tuple[str, float, float]] = []  # (engine, sent, acknowledged) in time.monotonic()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(w,)) for w in range(workers)]

    def __enter__(self) -> ServiceClient:
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
                        self.writes.append((base, start, time.monotonic()))
                    self.counts["write" if i % 2 else "read"] += 1
                i += 1
