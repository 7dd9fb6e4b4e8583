"""Engine benchmarks: ingestion vs the raw model, /retrieve latency, HNSW at scale, RSS, retrieval quality.

    .venv/bin/python -m bench.bench_engine            # default sizes (< 15 min on 2 cores)
    .venv/bin/python -m bench.bench_engine --quick    # small sizes (< 3 min)

Prints a table and writes bench/results/engine.json. Sections can be picked with --only; each lives in
bench/engine/ (workload, ingest, latency, hnsw, quality; report prints the table).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench.common import RESULTS, ROOT, load_embedder, write_result
from bench.engine.hnsw import bench_hnsw
from bench.engine.ingest import bench_ingest
from bench.engine.latency import Server, bench_latency, query_embed_ms
from bench.engine.quality import bench_quality
from bench.engine.report import print_table
from bench.engine.synth import SMALL_WORDS, passages
from bench.engine.workload import bench_workload

OUT = RESULTS / "engine.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="workload ingest latency hnsw quality")
    ap.add_argument("--rerank-model", default=os.environ.get("RAGENGINE_RERANK_MODEL"))
    args = ap.parse_args()
    q = args.quick
    sizes = {"ingest": 48 if q else 200, "small": 2_000 if q else 10_000, "large": 20_000 if q else 100_000,
             "hnsw": 100_000 if q else 1_000_000, "hnsw_budget": 25 if q else 240, "rounds": 100 if q else 300,
             "workload": 200 if q else 1000}
    want = set(args.only or ["workload", "ingest", "latency", "hnsw", "quality"])
    started = time.perf_counter()
    emb = load_embedder()
    results: dict = {"mode": "quick" if q else "default", "sizes": sizes, "machine": f"{os.cpu_count()} CPUs"}
    queries = [f"how does the {w} work with {v}?" for w, v in zip(passages(60, (1, 1), 9), passages(60, (2, 2), 10),
                                                                                 strict=True)]

    if "workload" in want:
        results["workload"] = {}
        for backend in ("openvino", "onnx", "torch"):
            print(f"engine process ({backend}): start-up, {sizes['workload']} passages, /retrieve, peak RSS ...", flush=True)
            results["workload"][backend] = bench_workload(backend, sizes["workload"], queries, sizes["rounds"])
    if "ingest" in want:
        print("ingestion ...", flush=True)
        results["ingest"] = bench_ingest(emb, sizes["ingest"])
    if "latency" in want:
        results["query_embed_p50_ms"] = query_embed_ms(emb, queries)
        n_small, n_large = sizes["small"], sizes["large"]
        print(f"server with {n_small} embedded + {n_large} precomputed chunks ...", flush=True)
        srv = Server("--embed", str(n_small), "--precomputed", str(n_large))
        try:
            for label, n in (("small", n_small), ("large", n_large)):
                print(f"/retrieve at {n} chunks ...", flush=True)
                lat = bench_latency(srv, label, queries, sizes["rounds"])
                lat["loaded_by"] = ("POST path (chunk+embed)" if label == "small"
                                    else "precomputed vectors via registry.add_precomputed")
                lat["target_p50_ms"] = results["query_embed_p50_ms"] + 2
                results[f"retrieve_{label}"] = lat
            texts = passages(n_small, words=SMALL_WORDS, seed=3) + passages(n_large, seed=4)
            data_mib = ((n_small + n_large) * 384 * 4 + sum(len(t.encode()) for t in texts)) / 2**20
            rss, baseline_rss = srv.rss_mib(), srv.base_rss_mib
            results["rss"] = {"chunks": n_small + n_large, "rss_mib": rss, "baseline_rss_mib": baseline_rss,
                              "data_mib": data_mib, "delta_mib": rss - baseline_rss,
                              "delta_over_data": (rss - baseline_rss) / data_mib,
                              "total_over_data": rss / data_mib, "target": 1.3}
        finally:
            srv.close()
    if "hnsw" in want:
        print(f"HNSW alone, up to {sizes['hnsw']} vectors (budget {sizes['hnsw_budget']} s) ...", flush=True)
        results["hnsw"] = bench_hnsw(sizes["hnsw"], sizes["hnsw_budget"], m=32, ef_construction=80)
    if "quality" in want:
        print("quality on debian-faq ...", flush=True)
        results["quality"] = bench_quality(emb, args.rerank_model)
    results["elapsed_s"] = time.perf_counter() - started
    write_result(OUT, results)
    print_table(results)
    print(f"\nwrote {OUT.relative_to(ROOT)} in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
