"""Tracing overhead: chat completions with tracing off, on (every request recorded and exported to a real
OpenTelemetry Collector) and on with a sampling ratio of 0 (spans created for nothing).

Each mode is a ``ragengine serve`` process (tests/support/engine_process.py: real embedding model, real
index, the test LLM with zero latency) configured only by the standard OTEL_* variables; the collector is
hack/otelcol's (OTLP receiver, file exporter). The same synthetic documents and queries go to each mode,
after a warm-up; p50/p99 of the client latency and of the engine's own time (``Server-Timing: engine``,
the LLM wait taken out) at concurrency 1 and 16. Prints a table, writes bench/results/tracing.json.
Usage: python -m bench.bench_tracing [--requests 300] [--docs 200] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
from pathlib import Path

import httpx

from bench.bench_chat import WORDS, run_load
from bench.common import RESULTS, machine, write_result
from tests.support.engine_process import engine_process
from tests.support.otelcol import collector

OTEL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER",
             "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER")


def measure(work: Path, env: dict[str, str], docs: list[dict], queries: list[str], requests: int, seed: int) -> list:
    saved = {k: os.environ.pop(k) for k in OTEL_VARS if k in os.environ}
    os.environ.update(env)  # the engine process inherits them
    try:
        with engine_process(work) as engine:
            base = engine.base_url
            httpx.post(f"{base}/index", json={"index_name": "bench", "documents": docs}, timeout=600).raise_for_status()
            body = lambda q: {"index_name": "bench", "messages": [{"role": "user", "content": q}], "max_tokens": 32}  # noqa: E731
            asyncio.run(run_load(base, [body(q) for q in queries], 4))  # warm-up
            rng = random.Random(seed)
            return [asyncio.run(run_load(base, [body(rng.choice(queries)) for _ in range(requests)], c)) for c in (1, 16)]
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300, help="requests per mode and concurrency level")
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="80 requests, 100 docs")
    ap.add_argument("--out", default=str(RESULTS / "tracing.json"))
    args = ap.parse_args()
    if args.quick:
        args.requests, args.docs = 80, 100
    rng = random.Random(11)
    docs = [{"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 160))) + ".", "metadata": {"n": i}}
            for i in range(args.docs)]
    queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))) + "?" for _ in range(50)]
    results: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tracing-") as tmp, collector(Path(tmp) / "otelcol") as otelcol:
        modes = {
            "off": {},
            "on (ratio 1, exported)": {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc},
            "on (ratio 0)": {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc,
                             "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"},
        }
        for i, (mode, env) in enumerate(modes.items()):
            results[mode] = measure(Path(tmp) / f"mode{i}", env, docs, queries, args.requests, seed=5)
        exported = len(otelcol.spans())
    rows = [{"mode": mode, **{k: round(v, 2) if isinstance(v, float) else v for k, v in level.items()
                              if k != "p50_parts_ms"}} for mode, levels in results.items() for level in levels]
    out = {"machine": machine(),
           "docs": args.docs, "requests": args.requests, "spans_exported": exported, "rows": rows,
           "note": "engine = request received -> response ready minus the LLM call (Server-Timing); client = "
                   "the whole request as the client saw it"}
    write_result(Path(args.out), out)
    print(f"\n{out['machine']}; {args.docs} docs, {args.requests} requests per row; {exported} spans exported")
    print(f"{'mode':<24} {'conc':>4} {'client p50':>10} {'client p99':>10} {'engine p50':>10} {'engine p99':>10} {'req/s':>7}")
    for r in rows:
        print(f"{r['mode']:<24} {r['concurrency']:>4} {r['client_p50_ms']:>10.2f} {r['client_p99_ms']:>10.2f} "
              f"{r['engine_p50_ms']:>10.2f} {r['engine_p99_ms']:>10.2f} {r['rps']:>7.1f}")


if __name__ == "__main__":
    main()
