"""What ``long_query_windows`` costs per query: the query embedding with and without it, on the three
evaluation sets' questions, one question at a time as /retrieve embeds them (docs/retrieval.md,
"Long questions"). The search itself is unchanged (one query vector either way), so the cost does not
depend on the index size.

    nice -n 10 .venv/bin/python -m bench.eval.long_query_cost [--rounds 3] [--json bench/results/long_query_cost.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from bench.common import write_result
from bench.eval import datasets as ds


def p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def measure(embedder, texts: list[str], rounds: int) -> dict:
    from ragengine.retrieval.long_query import embed_query, pieces

    split = [t for t in texts if pieces(embedder, t) is not None]
    times: dict[str, list[float]] = {"off": [], "on": [], "pieces_check": []}
    for _ in range(rounds):
        for text in texts:  # alternate, so load changes hit both alike
            for mode in ("off", "on"):
                start = time.perf_counter()
                await embed_query(embedder, text, windows=mode == "on")
                times[mode].append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            pieces(embedder, text)
            times["pieces_check"].append((time.perf_counter() - start) * 1000)
    out = {"questions": len(texts), "longer_than_window": len(split),
           "windows_per_long_question": statistics.mean(len(pieces(embedder, t) or []) for t in split) if split else 0}
    for mode, values in times.items():
        out[f"{mode}_p50_ms"], out[f"{mode}_p99_ms"] = p(values, 0.5), p(values, 0.99)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    embedder = build_embedder(EngineSettings())
    results = {"load_average_at_start": os.getloadavg(), "cpus": os.cpu_count(), "sets": {}}
    try:
        for name, loader in ds.LOADERS.items():
            texts = [q.text for q in loader().questions]
            results["sets"][name] = r = asyncio.run(measure(embedder, texts, args.rounds))
            print(f"{name}: {r['longer_than_window']}/{r['questions']} questions longer than the window "
                  f"({r['windows_per_long_question']:.1f} windows each); embed p50 {r['off_p50_ms']:.2f} ms cut, "
                  f"{r['on_p50_ms']:.2f} ms windowed (p99 {r['off_p99_ms']:.1f} / {r['on_p99_ms']:.1f}); "
                  f"the length check alone p50 {r['pieces_check_p50_ms'] * 1000:.0f} us", flush=True)
    finally:
        embedder.close()
    results["load_average_at_end"] = os.getloadavg()
    print(f"load average {results['load_average_at_start']} -> {results['load_average_at_end']}")
    if args.json:
        write_result(args.json, results, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
