"""HNSW alone at scale: build time, latency and recall against an exact search."""

from __future__ import annotations

import time

import numpy as np

from bench.common import pct
from bench.engine.synth import clustered_unit_vectors


def bench_hnsw(target: int, budget_s: float, m: int, ef_construction: int) -> dict:
    import faiss

    from ragengine.index.store import VectorStore

    xb = clustered_unit_vectors(target, seed=7)
    rng = np.random.default_rng(8)
    nq = 200
    xq = xb[rng.integers(0, target, nq)] + 0.05 * rng.standard_normal((nq, xb.shape[1])).astype(np.float32) / np.sqrt(384)
    xq /= np.linalg.norm(xq, axis=1, keepdims=True)
    store = VectorStore(384, hnsw_threshold=0, hnsw_m=m, ef_construction=ef_construction)
    index = store.build_hnsw(xb[:0])
    t0 = time.perf_counter()
    built = 0
    step = 50_000
    while built < target and time.perf_counter() - t0 < budget_s:
        index.add(xb[built : built + step])
        built = index.ntotal
    build_s = time.perf_counter() - t0
    flat = faiss.IndexFlatIP(384)
    flat.add(xb[:built])
    _, truth = flat.search(xq, 10)
    sweeps = []
    for ef in (32, 64, 128, 256):
        index.hnsw.efSearch = ef
        times, hits = [], 0
        for i in range(nq):
            t = time.perf_counter()
            _, ids = index.search(xq[i : i + 1], 10)
            times.append((time.perf_counter() - t) * 1000)
            hits += len(set(ids[0]) & set(truth[i]))
        sweeps.append({"ef_search": ef, "p50_ms": pct(times, 50), "p99_ms": pct(times, 99), "recall_at_10": hits / (nq * 10)})
    best = next((s for s in sweeps if s["recall_at_10"] >= 0.95), sweeps[-1])
    return {"target_vectors": target, "built_vectors": built, "build_s": build_s, "m": m,
            "ef_construction": ef_construction, "sweep": sweeps, "chosen": best}
