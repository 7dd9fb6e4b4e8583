"""MCP benchmark: what ``/mcp``'s ``search`` costs over ``/retrieve`` for the same query, and concurrent sessions.

Starts the engine (``ragengine serve``, the real embedding model, FAISS, an API key) as a subprocess
(tests/support/engine_process.py), indexes ``--docs`` documents, then:

- side by side, per query (the same queries, interleaved so drift hits both): ``POST /retrieve``
  (``max_chunks_per_document: 1``, what ``search`` runs) with httpx on a kept-alive connection, and the MCP
  ``search`` tool with the official client (``mcp.client.Client`` over streamable HTTP) on the 2026-07-28
  revision (one POST per call, no session) and on a handshake-era session (``mode="legacy"``). Latency is
  measured at the client, so the MCP rows include the SDK's client (JSON-RPC, validation) as well as the
  server's transport; the target (issue 42) is p50 at most 2 ms over ``/retrieve``;
- ``--sessions`` (32) clients at once, each with its own legacy session (initialize, the SSE stream), each
  making ``--calls`` searches: errors (any exception or ``isError``), calls per second, p50 / p99.

Usage: python -m bench.bench_mcp [--docs 500] [--queries 200] [--sessions 32] [--calls 10] [--quick]
Prints a table, writes bench/results/mcp.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import httpx
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from bench.common import RESULTS, ROOT, machine, pct, write_result
from tests.support.engine_process import engine_process

KEY = "bench-key-0123456789abcdef"
INDEX = "bench"
WORDS = ["pump", "valve", "boiler", "turbine", "pressure", "gasket", "seal", "bearing", "filter", "sensor", "alarm",
         "shift", "operator", "maintenance", "inspection", "torque", "coolant", "flow", "meter", "schedule"]


def summary(ms: list[float]) -> dict:
    return {"p50_ms": round(pct(ms, 50), 2), "p99_ms": round(pct(ms, 99), 2), "n": len(ms)}


def seed(base: str, docs: int, rng: random.Random) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as http:
        for start in range(0, docs, 100):
            batch = [{"doc_id": f"doc-{n}", "text": " ".join(f"Procedure {n}.{i}: " + " ".join(rng.choices(WORDS, k=12))
                                                           + "." for i in range(6)), "metadata": {"title": f"Doc {n}"}}
                     for n in range(start, min(docs, start + 100))]
            http.post("/index", json={"index_name": INDEX, "documents": batch}).raise_for_status()


def connect(base: str, mode: str) -> tuple[httpx2.AsyncClient, Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    return http, Client(streamable_http_client(f"{base}/mcp", http_client=http), mode=mode)


async def side_by_side(base: str, queries: list[str], top_k: int) -> dict:
    rows: dict[str, list[float]] = {"/retrieve": [], "mcp search (2026-07-28)": [], "mcp search (legacy session)": []}
    modern_http, modern = connect(base, "auto")
    legacy_http, legacy = connect(base, "legacy")
    async with (httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as rest,
                modern_http, modern, legacy_http, legacy):
        for q in queries[:5]:  # warm-up: connections, the query path
            await rest.post("/retrieve", json={"index_name": INDEX, "query": q, "max_node_count": top_k})
            await modern.call_tool("search", {"query": q, "index": INDEX, "top_k": top_k})
            await legacy.call_tool("search", {"query": q, "index": INDEX, "top_k": top_k})
        for q in queries:
            t = time.perf_counter()
            r = await rest.post("/retrieve", json={"index_name": INDEX, "query": q, "max_node_count": top_k,
                                                   "max_chunks_per_document": 1})
            rows["/retrieve"].append((time.perf_counter() - t) * 1000)
            r.raise_for_status()
            for name, client in (("mcp search (2026-07-28)", modern), ("mcp search (legacy session)", legacy)):
                t = time.perf_counter()
                res = await client.call_tool("search", {"query": q, "index": INDEX, "top_k": top_k})
                rows[name].append((time.perf_counter() - t) * 1000)
                assert not res.is_error, res.content
    out = {name: summary(ms) for name, ms in rows.items()}
    base_p50 = out["/retrieve"]["p50_ms"]
    for name in rows:
        out[name]["over_retrieve_p50_ms"] = round(out[name]["p50_ms"] - base_p50, 2)
    return out


async def concurrent(base: str, queries: list[str], sessions: int, calls: int) -> dict:
    latencies: list[float] = []
    errors: list[str] = []

    async def one(n: int) -> None:
        http, client = connect(base, "legacy")
        try:
            async with http, client:
                for i in range(calls):
                    t = time.perf_counter()
                    res = await client.call_tool("search", {"query": queries[(n * calls + i) % len(queries)],
                                                            "index": INDEX, "top_k": 5})
                    latencies.append((time.perf_counter() - t) * 1000)
                    if res.is_error:
                        errors.append(str(res.content[0]))
        except Exception as exc:  # a failed session counts: the target is none
            errors.append(f"{type(exc).__name__}: {exc}")

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(sessions)))
    elapsed = time.perf_counter() - started
    return {"sessions": sessions, "calls_per_session": calls, "errors": len(errors), "first_errors": errors[:3],
            "calls_per_s": round(len(latencies) / elapsed, 1), **summary(latencies or [0.0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100 documents, 40 queries, 32 sessions of 3 calls")
    args = parser.parse_args()
    if args.quick:
        args.docs, args.queries, args.calls = 100, 40, 3
    rng = random.Random(0)
    queries = [" ".join(rng.choices(WORDS, k=5)) + "?" for _ in range(args.queries)]
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as work, \
            engine_process(Path(work), llm=False, settings={"api_key": KEY}) as engine:
        seed(engine.base_url, args.docs, rng)
        rows = asyncio.run(side_by_side(engine.base_url, queries, args.top_k))
        load = asyncio.run(concurrent(engine.base_url, queries, args.sessions, args.calls))
    result = {"machine": machine(), "docs": args.docs, "quick": args.quick,
              "side_by_side": rows, "concurrent_sessions": load}
    print(f"{result['machine']}; {args.docs} documents, {args.queries} queries, top {args.top_k}")
    print(f"{'call':32} {'p50 ms':>8} {'p99 ms':>8} {'p50 over /retrieve':>20}")
    for name, row in rows.items():
        print(f"{name:32} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} {row['over_retrieve_p50_ms']:20.2f}")
    print(f"{load['sessions']} sessions at once x {load['calls_per_session']} searches: {load['errors']} errors, "
          f"{load['calls_per_s']} calls/s, p50 {load['p50_ms']} ms, p99 {load['p99_ms']} ms")
    out = RESULTS / "mcp.json"
    write_result(out, result)
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
