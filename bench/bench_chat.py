"""Chat overhead benchmark: the engine's own time per RAG request, with the LLM taken out.

Starts the fake vLLM (tests/llm_server, zero latency) and the engine (``ragengine serve``, real embedding
model, real IndexRegistry) as subprocesses through tests/support/engine_process.py, indexes synthetic
documents, then sends RAG chat requests:

- engine time = the engine's ``Server-Timing: engine;dur=`` (request received → response ready, minus
  the time waiting for the LLM); client latency is reported beside it;
- p50/p99 and requests/s at 1, 4, 16 and 64 concurrent clients (issue 28: throughput must not fall as clients rise);
- streaming time-to-first-token overhead = TTFT through the engine minus TTFT asking the LLM directly.

Chunk token counts are stored with the chunks at ingestion (docs/performance.md); a warm-up pass still
runs first (prompt counts, caches, first-use code paths). Prints a table and writes bench/results/chat.json.
Usage: python -m bench.bench_chat [--requests 200] [--docs 300] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import RESULTS, machine, pct, write_result
from tests.support.engine_process import engine_process

WORDS = ["kubernetes", "operator", "gpu", "node", "vector", "index", "embedding", "search", "latency", "cluster",
         "model", "inference", "deployment", "storage", "replica", "shard", "token", "context", "window", "prompt",
         "retrieval", "chunk", "document", "query", "faiss", "bm25", "hybrid", "rerank", "stream", "cache", "metrics",
         "health", "persist", "snapshot", "journal"]


async def run_load(base: str, bodies: list[dict], concurrency: int) -> dict:
    engine_ms: list[float] = []
    client_ms: list[float] = []
    parts: dict[str, list[float]] = {}
    queue = list(bodies)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency * 2)) as client:
        async def worker() -> None:
            while queue:
                body = queue.pop()
                t = time.perf_counter()
                r = await client.post(f"{base}/v1/chat/completions", json=body)
                client_ms.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
                timing = dict(part.strip().split(";dur=") for part in r.headers["server-timing"].split(","))
                engine_ms.append(float(timing["engine"]))
                for name, value in timing.items():
                    parts.setdefault(name, []).append(float(value))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    # What Server-Timing does not name: building the prompt and the upstream body, JSON, the event loop.
    # tokens overlaps retrieve when top_k is fixed, so the rest is engine - max(tokens, retrieve) - select.
    parts["prompt build + rest"] = [max(0.0, e - max(t, r) - s) for e, t, r, s in zip(
        parts.get("engine", []), parts.get("tokens", []), parts.get("retrieve", []), parts.get("select", []), strict=True)]
    return {"concurrency": concurrency, "requests": len(bodies), "rps": len(bodies) / elapsed,
            "engine_p50_ms": statistics.median(engine_ms), "engine_p99_ms": pct(engine_ms, 99),
            "client_p50_ms": statistics.median(client_ms), "client_p99_ms": pct(client_ms, 99),
            "p50_parts_ms": {k: round(statistics.median(v), 2) for k, v in parts.items()}}


async def ttft(url: str, body: dict, n: int, concurrency: int = 1) -> float:
    """Median time to the first content byte of a stream, ``n`` streams by ``concurrency`` workers."""
    out = []
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency * 2)) as client:
        async def one() -> None:
            t = time.perf_counter()
            async with client.stream("POST", url, json=body) as r:
                first = None
                async for line in r.aiter_lines():  # read to the end: a closed stream is a cancellation
                    if first is None and line.startswith("data: {"):
                        choices = json.loads(line[6:]).get("choices") or [{}]
                        if (choices[0].get("delta") or {}).get("content"):
                            first = (time.perf_counter() - t) * 1000
            out.append(first)

        async def worker(count: int) -> None:
            for _ in range(count):
                await one()

        await asyncio.gather(*(worker(n // concurrency) for _ in range(concurrency)))
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="50 requests, 100 docs")
    ap.add_argument("--out", default=str(RESULTS / "chat.json"))
    args = ap.parse_args()
    if args.quick:
        args.requests, args.docs = 50, 100
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="bench-chat-") as work, engine_process(Path(work)) as engine:
        base, llm_base = engine.base_url, engine.llm_url
        docs = [{"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 160))) + ".",
                 "metadata": {"n": i}} for i in range(args.docs)]
        t = time.perf_counter()
        httpx.post(f"{base}/index", json={"index_name": "bench", "documents": docs}, timeout=600).raise_for_status()
        index_s = time.perf_counter() - t
        queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))) + "?" for _ in range(50)]
        body = lambda q: {"index_name": "bench", "messages": [{"role": "user", "content": q}], "max_tokens": 32}  # noqa: E731
        asyncio.run(run_load(base, [body(q) for q in queries], 4))  # warm-up: token counts, caches, JIT paths
        rows = [asyncio.run(run_load(base, [body(rng.choice(queries)) for _ in range(args.requests)], c))
                for c in (1, 4, 16, 64)]
        stream_body = {**body(queries[0]), "stream": True}
        direct = {"model": "fake-llm", "stream": True, "messages": [{"role": "user", "content": queries[0]}]}
        first_byte = {}
        for c in (1, 16):
            engine_ttft = asyncio.run(ttft(f"{base}/v1/chat/completions", stream_body, 32, c))
            llm_ttft = asyncio.run(ttft(f"{llm_base}/chat/completions", direct, 32, c))
            first_byte[c] = {"engine": round(engine_ttft, 2), "llm_direct": round(llm_ttft, 2),
                             "overhead": round(engine_ttft - llm_ttft, 2)}
    result = {
        "machine": machine(),
        "docs": args.docs, "index_seconds": round(index_s, 2),
        "levels": [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in rows],
        "note": "engine = request received -> response ready, minus the LLM call; parts: tokens (prompt/query "
                "counts via the LLM's /tokenize, overlapping retrieve), retrieve (embed + search), select (token "
                "budget over the chunks), prompt build + rest (engine - max(tokens, retrieve) - select)",
        "stream_ttft_ms": first_byte[1],
        "stream_ttft_ms_c16": first_byte[16],
        "targets": {"engine_p50_ms": 15, "engine_p99_ms": 50},
    }
    print(f"\nchat overhead ({args.docs} docs, top_k >= 100, fake LLM with zero latency; {result['machine']})")
    print(f"{'conc':>4} {'reqs':>5} {'req/s':>7} {'engine p50':>11} {'engine p99':>11} {'client p50':>11} {'client p99':>11}")
    for r in rows:
        print(f"{r['concurrency']:>4} {r['requests']:>5} {r['rps']:>7.1f} {r['engine_p50_ms']:>9.2f}ms "
              f"{r['engine_p99_ms']:>9.2f}ms {r['client_p50_ms']:>9.2f}ms {r['client_p99_ms']:>9.2f}ms")
    for r in rows:
        print(f"  c={r['concurrency']} p50 parts (ms): {r['p50_parts_ms']}")
    for c, s in first_byte.items():
        print(f"stream first content byte at c={c}: engine {s['engine']:.2f} ms, LLM direct {s['llm_direct']:.2f} ms, "
              f"overhead {s['overhead']:.2f} ms")
    write_result(Path(args.out), result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
