"""Vector stores side by side: FAISS, PostgreSQL + pgvector, Milvus Lite, on this machine.

    .venv/bin/python bench/bench_stores.py            # 10k and 100k chunks, replicas 1-3 (--million adds 1M)
    .venv/bin/python bench/bench_stores.py --quick    # 10k and 100k chunks, replicas 1-2

Per store and size: write throughput (chunks/s through the registry's write path with precomputed
vectors, so the embedding model's speed is left out), in-process retrieval latency p50/p99 (hybrid,
top 10, the query vector given: store + fusion only, no HTTP, no embedding) and dense recall@10 against
an exact search. Then `/retrieve` throughput over HTTP with 1, 2, 3 real `ragengine serve` processes
sharing one PostgreSQL. On 2 cores that figure shows the overhead of sharing, not a speed-up: every
process embeds its queries on the same two cores. Writes bench/results/stores.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from bench.engine.synth import clustered_unit_vectors, passages  # noqa: E402
from tests.support.engine_process import engine_process  # noqa: E402
from tests.support.postgres import postgres_server  # noqa: E402

DIM = 384


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def registry_for(kind: str, settings_kw: dict, embedder):
    from ragengine.settings import EngineSettings
    from ragengine.versions import build_registry

    return build_registry(EngineSettings(**settings_kw, vector_store=kind), embedder)


async def measure(kind: str, settings_kw: dict, embedder, texts: list[str], vectors: np.ndarray, queries: np.ndarray,
                  query_texts: list[str]) -> dict:
    registry = registry_for(kind, settings_kw, embedder)
    await registry.start()
    name = f"bench{len(texts)}"
    start = time.perf_counter()
    for i in range(0, len(texts), 1000):
        await registry.add_precomputed(name, texts[i:i + 1000], vectors[i:i + 1000],
                                       [{"i": j} for j in range(i, min(i + 1000, len(texts)))])
    write_s = time.perf_counter() - start
    registry.settings.hybrid = True
    times = []
    for q, text in zip(queries, query_texts, strict=True):
        t0 = time.perf_counter()
        await registry.retrieve(name, text, 10, query_embedding=q)
        times.append((time.perf_counter() - t0) * 1000)
    legs: dict[str, list[float]] = {"dense": [], "keyword": []}
    # the shared stores' adapter, under the index's live version (FAISS keeps its legs in-process)
    adapter = getattr(getattr(registry, "inner", registry), "adapter", None)
    if adapter is not None:
        physical = (await registry.book(name)).live_version.physical
        for q, text in zip(queries, query_texts, strict=True):
            t0 = time.perf_counter()
            await asyncio.to_thread(adapter.dense, physical, q, 10, None)
            t1 = time.perf_counter()
            await asyncio.to_thread(adapter.keyword, physical, text, q, 10, None)
            legs["dense"].append((t1 - t0) * 1000)
            legs["keyword"].append((time.perf_counter() - t1) * 1000)
        bound = getattr(adapter, "keyword_candidates", None)
        if bound is not None:  # PostgreSQL: the same queries ranking every match (the code before the bound)
            legs["keyword_every_match"] = []
            adapter.keyword_candidates = 10**9
            for q, text in zip(queries, query_texts, strict=True):
                t0 = time.perf_counter()
                await asyncio.to_thread(adapter.keyword, physical, text, q, 10, None)
                legs["keyword_every_match"].append((time.perf_counter() - t0) * 1000)
            adapter.keyword_candidates = bound
    registry.settings.hybrid = False
    exact = np.argsort(-(vectors @ queries.T), axis=0)[:10].T
    found = 0
    for q, text, truth in zip(queries, query_texts, exact, strict=True):
        nodes = await registry.retrieve(name, text, 10, query_embedding=q)
        got = {n.text for n in nodes}
        found += sum(1 for j in truth if texts[j] in got)
    await registry.delete_index(name)
    await registry.close()
    return {"store": kind, "chunks": len(texts), "write_chunks_per_s": len(texts) / write_s,
            "retrieve_p50_ms": pct(times, 50), "retrieve_p99_ms": pct(times, 99),
            **{f"{leg}_p{q}_ms": pct(v, q) for leg, v in legs.items() for q in (50, 99)},
            "recall_at_10": found / (10 * len(queries))}


def throughput(bases: list[str], index: str, questions: list[str], seconds: float, concurrency: int = 8) -> float:
    done, stop = [0], threading.Event()
    lock = threading.Lock()

    def worker(i: int) -> None:
        with httpx.Client(base_url=bases[i % len(bases)], timeout=60) as client:
            k = i
            while not stop.is_set():
                client.post("/retrieve", json={"index_name": index, "query": questions[k % len(questions)]}).raise_for_status()
                with lock:
                    done[0] += 1
                k += concurrency

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return done[0] / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--million", action="store_true", help="add the 1M-chunk row (long: for `make bench`)")
    parser.add_argument("--no-replicas", action="store_true", help="skip the multi-process throughput part")
    parser.add_argument("--stores", nargs="*", default=["faiss", "postgres", "milvus"], help="stores to measure")
    parser.add_argument("--sizes", nargs="*", type=int, help="chunk counts (default: 10k, 100k; --million adds 1M)")
    parser.add_argument("--milvus-max-chunks", type=int, default=10_000,
                        help="Milvus Lite above this size is skipped: its search took 1.4 s p50 at 10k chunks here, "
                             "so 100k would take hours (a Milvus cluster is what to measure at that size)")
    args = parser.parse_args()
    sizes = args.sizes or ((10_000, 100_000) if args.quick else (10_000, 100_000) + ((1_000_000,) if args.million else ()))
    replica_counts = (1, 2) if args.quick else (1, 2, 3)
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    embedder = build_embedder(EngineSettings())
    results: dict = {"stores": [], "replicas": []}
    with postgres_server() as sa_url, tempfile.TemporaryDirectory() as tmp_name:
        url, tmp = sa_url.replace("postgresql+psycopg://", "postgresql://"), Path(tmp_name)
        for n in sizes:
            texts = passages(n, seed=n)
            vectors = clustered_unit_vectors(n, DIM, seed=n)
            rng = np.random.default_rng(7)
            picks = rng.integers(0, n, 100)
            queries = vectors[picks] + 0.05 * rng.standard_normal((100, DIM)).astype(np.float32)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            query_texts = [" ".join(texts[i].split()[2:8]) for i in picks]
            for kind in args.stores:
                if kind == "milvus" and n > args.milvus_max_chunks:
                    print(f"milvus    {n:>7} chunks: skipped (--milvus-max-chunks {args.milvus_max_chunks})", flush=True)
                    continue
                kw: dict = {"data_dir": tmp / f"faiss{n}"}
                if kind == "postgres":
                    kw |= {"vector_store_url": url, "vector_store_prefix": f"bench{n}"}
                if kind == "milvus":
                    kw |= {"vector_store_url": str(tmp / f"milvus{n}.db"), "vector_store_prefix": f"bench{n}"}
                row = asyncio.run(measure(kind, kw, embedder, texts, vectors, queries, query_texts))
                results["stores"].append(row)
                print(f"{kind:9} {n:>7} chunks: write {row['write_chunks_per_s']:8.0f} chunks/s, fused p50/p99 "
                      f"{row['retrieve_p50_ms']:6.2f} / {row['retrieve_p99_ms']:6.2f} ms, dense "
                      f"{row['dense_p50_ms']:6.2f} / {row['dense_p99_ms']:6.2f} ms, keyword {row['keyword_p50_ms']:6.2f} / "
                      f"{row['keyword_p99_ms']:6.2f} ms, recall@10 {row['recall_at_10']:.3f}", flush=True)
        if not args.no_replicas:
            texts = passages(2000, seed=3)
            reg = registry_for("postgres", {"vector_store_url": url, "vector_store_prefix": "replicas",
                                            "data_dir": tmp / "r"}, embedder)

            async def seed() -> None:
                await reg.start()
                await reg.add_precomputed("shared", texts, embedder.embed_texts_sync(texts))
                await reg.close()

            asyncio.run(seed())
            questions = [" ".join(t.split()[2:9]) for t in texts[:200]]
            settings = {"vector_store": "postgres", "vector_store_url": url, "vector_store_prefix": "replicas"}
            bases: list[str] = []
            with ExitStack() as engines:  # one more engine process per step, the earlier ones kept running
                for count in replica_counts:
                    while len(bases) < count:
                        engine = engines.enter_context(engine_process(tmp / f"engine{len(bases)}", settings=settings, llm=False))
                        bases.append(engine.base_url)
                    rps = throughput(bases, "shared", questions, 10 if args.quick else 20)
                    results["replicas"].append({"processes": count, "retrieve_req_per_s": rps})
                    print(f"{count} engine process(es) on one PostgreSQL: {rps:.1f} /retrieve req/s", flush=True)
    embedder.close()
    print("\n| store | chunks | write chunks/s | fused p50 / p99 (ms) | dense p50 / p99 | keyword p50 / p99 "
          "| keyword, every match ranked | dense recall@10 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results["stores"]:
        every = (f"{r['keyword_every_match_p50_ms']:.2f} / {r['keyword_every_match_p99_ms']:.2f}"
                 if "keyword_every_match_p50_ms" in r else "-")
        print(f"| {r['store']} | {r['chunks']:,} | {r['write_chunks_per_s']:,.0f} | {r['retrieve_p50_ms']:.2f} / "
              f"{r['retrieve_p99_ms']:.2f} | {r['dense_p50_ms']:.2f} / {r['dense_p99_ms']:.2f} | "
              f"{r['keyword_p50_ms']:.2f} / {r['keyword_p99_ms']:.2f} | {every} | {r['recall_at_10']:.3f} |")
    if results["replicas"]:
        print("\n| engine processes on one PostgreSQL | /retrieve req/s (concurrency 8) |\n|---|---|")
        for r in results["replicas"]:
            print(f"| {r['processes']} | {r['retrieve_req_per_s']:.1f} |")
    out = ROOT / "bench" / "results" / "stores.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
