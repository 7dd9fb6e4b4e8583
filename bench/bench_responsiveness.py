"""Responsiveness during ingestion: /health and /retrieve latency while a big POST /index runs.

    .venv/bin/python -m bench.bench_responsiveness            # 40 long documents, 30 probe rounds
    .venv/bin/python -m bench.bench_responsiveness --quick    # 20 documents

A real engine process (tests/support/engine_process.py). First the idle latency of both routes, then
the same probes in a loop while one client ingests; prints a table and writes
bench/results/responsiveness.json. Targets (not asserted anywhere else): /health max < 500 ms and
/retrieve p50 < 1 s during ingestion (formerly wall-clock asserts in tests/engine/test_api.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.common import RESULTS, pct, write_result
from tests.support.engine_process import engine_process

OUT = RESULTS / "responsiveness.json"
TARGETS = {"health_max_ms": 500.0, "retrieve_p50_ms": 1000.0}


def probe(client: httpx.Client) -> tuple[float, float]:
    started = time.perf_counter()
    client.get("/health").raise_for_status()
    health = time.perf_counter() - started
    started = time.perf_counter()
    client.post("/retrieve", json={"index_name": "kb", "query": "cosine similarity"}).raise_for_status()
    return health * 1000, (time.perf_counter() - started) * 1000


def summary(samples: list[tuple[float, float]]) -> dict:
    health, retrieve = [h for h, _ in samples], [r for _, r in samples]
    return {"probes": len(samples), "health_p50_ms": pct(health, 50), "health_max_ms": max(health, default=float("nan")),
            "retrieve_p50_ms": pct(retrieve, 50), "retrieve_p99_ms": pct(retrieve, 99)}


def run(documents: int, rounds: int) -> dict:
    big = [{"text": " ".join(f"word{j} sentence {i} about ingestion load." for j in range(40))} for i in range(documents)]
    with tempfile.TemporaryDirectory(prefix="bench-resp-") as work, engine_process(Path(work)) as engine, \
            httpx.Client(base_url=engine.base_url, timeout=300) as client:
        client.post("/index", json={"index_name": "kb", "documents": [
            {"text": "FAISS searches unit vectors by inner product, which equals cosine similarity."}]}).raise_for_status()
        idle = [probe(client) for _ in range(rounds)]
        done, ingest = threading.Event(), {}

        def ingest_big() -> None:
            started = time.perf_counter()
            with httpx.Client(base_url=engine.base_url, timeout=600) as other:
                other.post("/index", json={"index_name": "big", "documents": big}).raise_for_status()
            ingest["seconds"] = time.perf_counter() - started
            done.set()

        thread = threading.Thread(target=ingest_big)
        thread.start()
        during = []
        while not done.is_set():
            during.append(probe(client))
        thread.join()
    return {"documents": documents, "ingest_s": ingest["seconds"], "idle": summary(idle), "during_ingestion": summary(during),
            "targets": TARGETS}


def print_table(r: dict) -> None:
    print(f"\n/health and /retrieve while ingesting {r['documents']} long documents ({r['ingest_s']:.1f} s)")
    print(f"{'':22} {'probes':>7} {'health p50':>11} {'health max':>11} {'retrieve p50':>13} {'retrieve p99':>13}")
    for name in ("idle", "during_ingestion"):
        s = r[name]
        print(f"{name:22} {s['probes']:>7} {s['health_p50_ms']:>9.1f}ms {s['health_max_ms']:>9.1f}ms "
              f"{s['retrieve_p50_ms']:>11.1f}ms {s['retrieve_p99_ms']:>11.1f}ms")
    during = r["during_ingestion"]
    ok = during["health_max_ms"] < TARGETS["health_max_ms"] and during["retrieve_p50_ms"] < TARGETS["retrieve_p50_ms"]
    print(f"targets during ingestion: /health max < {TARGETS['health_max_ms']:.0f} ms, /retrieve p50 < "
          f"{TARGETS['retrieve_p50_ms']:.0f} ms: {'met' if ok else 'MISSED'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result = run(documents=20 if args.quick else 40, rounds=10 if args.quick else 30)
    print_table(result)
    write_result(OUT, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
