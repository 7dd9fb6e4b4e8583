"""What the fusion's candidate count costs /retrieve at 100k chunks: 20 per side (before) vs 50 (the default).

The pool size changes three stages of a hybrid search (index/search.py) and nothing else: the dense
search's k, the BM25 search's top-k, and the fusion itself (``retrieval.hybrid.fuse`` over both lists).
Each is timed on the engine's own classes over 100k synthetic chunks (random unit vectors; texts drawn
from a Zipf vocabulary), for short and long queries, as p50 / p99 over repeated queries.

    .venv/bin/python -m bench.bench_fusion [--chunks 100000] [--hnsw] [--out bench/results/fusion.json]

Results go under the dense index kind ("flat" / "hnsw") in the output file.

Without ``--hnsw`` the dense side is a flat index (what an engine holds up to ``hnsw_threshold``); with
it, HNSW (the engine switches at 50k by default; efSearch = max(128, 2k), so k = 20 and 50 search alike).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, pct, write_result
from ragengine.index.store import VectorStore
from ragengine.retrieval.bm25 import BM25Index
from ragengine.retrieval.hybrid import FusionParams, fuse

DIM = 384
POOLS = (20, 50)


def build(n: int, hnsw: bool, seed: int = 0) -> tuple[VectorStore, BM25Index, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    # The engine's defaults: HNSW above 50k vectors (M 32, efConstruction 80, efSearch 128).
    store = VectorStore.from_vectors(v, hnsw_threshold=50_000 if hnsw else n + 1, ef_construction=80)
    del v
    vocab = np.array([f"w{i}" for i in range(50_000)])
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()
    bm25 = BM25Index()
    for slot in range(n):
        bm25.add(slot, " ".join(vocab[rng.choice(len(vocab), size=150, p=zipf)]))
    queries = [" ".join(vocab[rng.choice(len(vocab), size=size, p=zipf)]) for size in [8] * 50 + [150] * 50]
    qv = rng.standard_normal((len(queries), DIM)).astype(np.float32)
    return store, bm25, qv / np.linalg.norm(qv, axis=1, keepdims=True), queries


def time_stages(store: VectorStore, bm25: BM25Index, qvecs: np.ndarray, queries: list[str], rounds: int) -> dict:
    """Per pool, p50 / p99 of each stage; the pools alternate query by query so load drifts hit both."""
    alive = store.alive
    params = FusionParams()
    stages = {pool: {"dense_ms": [], "bm25_ms": [], "fuse_ms": [], "total_ms": []} for pool in POOLS}
    for _ in range(rounds):
        for qvec, query in zip(qvecs, queries, strict=True):
            for pool in POOLS:
                t0 = time.perf_counter()
                d_slots, d_cos = store.search(qvec, pool, None)
                t1 = time.perf_counter()
                s_slots, s_scores = bm25.search(query, pool, alive)
                t2 = time.perf_counter()
                dense = {int(s): float(c) for s, c in zip(d_slots, d_cos, strict=True)}  # as index/search.py
                sparse = {int(s): float(v) for s, v in zip(s_slots, s_scores, strict=True)}
                fuse(list(dense.items()), list(sparse.items()), params=params)[:10]
                t3 = time.perf_counter()
                for name, ms in (("dense_ms", t1 - t0), ("bm25_ms", t2 - t1), ("fuse_ms", t3 - t2), ("total_ms", t3 - t0)):
                    stages[pool][name].append(ms * 1000)
    return {pool: {name: {"p50": pct(v, 50), "p99": pct(v, 99)} for name, v in st.items()} for pool, st in stages.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--hnsw", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "fusion.json")
    args = ap.parse_args()
    started = time.perf_counter()
    store, bm25, qvecs, queries = build(args.chunks, args.hnsw)
    print(f"built {args.chunks} chunks ({store.kind}) in {time.perf_counter() - started:.0f} s", flush=True)
    out: dict = {"chunks": args.chunks, "dense_index": store.kind, "machine": f"{os.cpu_count()} CPUs",
                 "load_average": os.getloadavg(), "queries": "50 of 8 terms + 50 of 150 terms", "pools": {}}
    time_stages(store, bm25, qvecs[:5], queries[:5], 1)  # warm-up
    out["pools"] = time_stages(store, bm25, qvecs, queries, args.rounds)
    a, b = (out["pools"][p] for p in POOLS)
    out["added_p50_ms"] = {k: b[k]["p50"] - a[k]["p50"] for k in a}
    for pool, r in out["pools"].items():
        print(f"pool {pool:>3}: " + ", ".join(f"{k} p50 {v['p50']:.3f} p99 {v['p99']:.3f}" for k, v in r.items()))
    print("added p50 (ms): " + json.dumps({k: round(v, 3) for k, v in out["added_p50_ms"].items()}))
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    previous[store.kind] = out  # one entry per dense index kind (flat, hnsw)
    write_result(args.out, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
