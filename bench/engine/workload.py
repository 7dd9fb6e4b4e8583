"""The user's view of one engine process: start-up to /health, ingestion, /retrieve and peak RSS."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from bench.common import pct, rss_mib
from bench.engine.synth import passages


def bench_workload(backend: str, n: int, queries: list[str], rounds: int) -> dict:
    """A fresh engine process (``ragengine serve`` through tests/support/engine_process.py, the given
    embedding backend, no LLM): seconds from exec to the first 200 from /health, then ``n`` passages
    through POST /index (passages/s), /retrieve p50/p99 on them, and the process's peak RSS (VmHWM)."""
    from tests.support.engine_process import engine_process

    texts = passages(n, words=(60, 160), seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with engine_process(Path(tmp), settings={"embedding_backend": backend}, llm=False) as engine, \
                httpx.Client(base_url=engine.base_url, timeout=600) as client:
            startup_s = time.perf_counter() - t0
            t = time.perf_counter()
            for start in range(0, n, 100):
                client.post("/index", json={"index_name": "w", "documents": [{"text": x} for x in texts[start:start + 100]]}
                            ).raise_for_status()
            ingest_s = time.perf_counter() - t
            lat = []
            for i in range(rounds):
                t = time.perf_counter()
                client.post("/retrieve", json={"index_name": "w", "query": queries[i % len(queries)],
                                               "max_node_count": 10}).raise_for_status()
                lat.append((time.perf_counter() - t) * 1000)
            peak = rss_mib(engine.pid, "VmHWM")
    return {"backend": backend, "passages": n, "startup_s": startup_s, "ingest_passages_per_s": n / ingest_s,
            "retrieve_p50_ms": pct(lat, 50), "retrieve_p99_ms": pct(lat, 99), "peak_rss_mib": peak}
