"""Vector stores side by side at scale: FAISS, PostgreSQL + pgvector, Milvus Lite, on this machine.

    .venv/bin/python -m bench.bench_stores            # 10k, 100k and 1M chunks, replicas 1-3 (long: the 1M rows)
    .venv/bin/python -m bench.bench_stores --quick    # 10k and 100k chunks, replicas 1-2

Each (store, size) row runs in a process of its own, so its memory is its own. Per row:
- load: chunks/s through the registry's write path with precomputed vectors (the embedding model's speed
  left out); PostgreSQL's HNSW index is built after the load (``build_hnsw``), its time given apart;
- PostgreSQL: the time to load a replica's in-memory keyword index (``keyword_mirror``) after that; then a
  checkpoint and any running autovacuum are waited for (``settle``), so the searches are timed on a server at
  rest, and the autovacuums that ran while they were timed are counted in the row;
- retrieval latency p50 / p99 per leg (dense, keyword; PostgreSQL's SQL keyword leg too) and fused
  (hybrid, top 10), over three rounds of the 100 queries, in process, the query vector given (store +
  fusion only, no HTTP, no embedding), and fused at top-k 300 (the API's maximum); before them, 20 other
  queries warm the engine up, untimed (its pooled connections, the server's cache), so the p99 of a
  serving engine is measured, not its first searches;
- dense recall@10 against an exact search, and the HNSW search breadth's curve (dense recall@10 and p99
  at ef_search 64 to 512);
- the index's memory in the engine process (RSS after the load minus before it: the bench's own copy of
  the data left out) and the store's size on disk.
Stores: ``faiss``, ``faiss-sq8`` (FAISS with 8-bit vector codes), ``postgres``, ``milvus`` (Milvus Lite).
Then `/retrieve` throughput over HTTP with 1, 2, 3 real `ragengine serve` processes sharing one
PostgreSQL. On 2 cores that figure shows the overhead of sharing, not a speed-up. Writes
bench/results/stores.json and draws docs/images/stores-scale.svg (latency and memory against chunks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np

from bench.common import RESULTS, ROOT, pct, write_result
from bench.engine.synth import clustered_unit_vectors, passages
from bench.stores_report import EF_CURVE, fmt_row, report
from tests.support.engine_process import engine_process
from tests.support.postgres import postgres_server

DIM = 384
QUERIES = 100
WARMUP = 20  # other queries, searched untimed before the timed ones
ROUNDS = 3  # latency is sampled over the queries this many times: a p99 of 300 searches, not of 100


def registry_for(kind: str, settings_kw: dict, embedder):
    from ragengine.settings import EngineSettings
    from ragengine.versions import build_registry

    if kind in ("faiss", "faiss-sq8"):  # named, not the engine's default (sq8 since issue 45): a row is one format
        kind, settings_kw = "faiss", {"vector_compression": "sq8" if kind == "faiss-sq8" else "none", **settings_kw}
    return build_registry(EngineSettings(**settings_kw, vector_store=kind), embedder)


def set_ef(registry, adapter, physical: str, ef: int) -> None:
    """The HNSW search breadth of one index, on either kind of store."""
    if adapter is not None:
        adapter.ef_search = ef
        return
    store = registry.inner.get(physical).store
    store.ef_search = ef
    if store.kind == "hnsw":
        store.index.hnsw.efSearch = ef


def disk_bytes(kind: str, settings_kw: dict, adapter) -> int:
    """The store's size on disk: PostgreSQL's tables and indexes of the schema, or the files."""
    if kind == "postgres":
        from sqlalchemy import text

        with adapter.engine.connect() as conn:
            return int(conn.execute(text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relkind IN ('r', 'm')"),
                {"s": adapter.schema}).scalar())
    root = Path(settings_kw["vector_store_url"] if kind == "milvus" else settings_kw["data_dir"])
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files)


AUTOVACUUMS_RUNNING = "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker')"


def autovacuums(adapter) -> int:
    """PostgreSQL's autovacuum runs so far on the schema's tables, and those running now."""
    from sqlalchemy import text

    with adapter.engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT coalesce((SELECT sum(autovacuum_count) FROM pg_stat_user_tables WHERE schemaname = :s), 0)"
            f" + {AUTOVACUUMS_RUNNING}"), {"s": adapter.schema}).scalar())


def settle(adapter, limit_s: float = 600) -> float:
    """Let PostgreSQL finish the load's background work before the searches are timed: write out the pages the
    load and the build dirtied (a checkpoint would spread that over the next minutes) and wait for running
    autovacuums to end. Returns the seconds it took."""
    from sqlalchemy import text

    t0 = time.perf_counter()
    with adapter.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("CHECKPOINT"))
        while time.perf_counter() - t0 < limit_s and conn.execute(text(f"SELECT {AUTOVACUUMS_RUNNING}")).scalar():
            time.sleep(1)
    return time.perf_counter() - t0


async def timed(fn, *args, **kw) -> float:
    t0 = time.perf_counter()
    await fn(*args, **kw)
    return (time.perf_counter() - t0) * 1000


async def dense_recall(registry, name: str, texts: list[str], query_texts: list[str], queries: np.ndarray,
                       exact: np.ndarray) -> tuple[float, list[float]]:
    """Recall@10 of ``registry``'s search of ``name`` against ``exact`` (each query's true ten, as rows of
    ``texts``), and each search's milliseconds."""
    found, took = 0, []
    for q, t, truth in zip(queries, query_texts, exact, strict=True):
        t0 = time.perf_counter()
        got = {node.text for node in await registry.retrieve(name, t, 10, query_embedding=q)}
        took.append((time.perf_counter() - t0) * 1000)
        found += sum(1 for j in truth if texts[j] in got)
    return found / (10 * len(queries)), took


async def measure(kind: str, settings_kw: dict, n: int) -> dict:
    """One row, in this process: load n chunks, build, query, measure."""
    import psutil

    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    def say(what: str) -> None:
        print(f"  {kind} {n:,}: {what}", file=sys.stderr, flush=True)

    embedder = build_embedder(EngineSettings())
    texts = passages(n, seed=n)
    vectors = clustered_unit_vectors(n, DIM, seed=n)
    rng = np.random.default_rng(7)
    picks = rng.integers(0, n, QUERIES)
    queries = vectors[picks] + 0.05 * rng.standard_normal((QUERIES, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    query_texts = [" ".join(texts[i].split()[2:8]) for i in picks]
    warm = np.random.default_rng(8).integers(0, n, WARMUP)  # a generator of their own: the 100 stay as they were
    warmup = [(vectors[i], " ".join(texts[i].split()[3:9])) for i in warm]
    process = psutil.Process()
    rss_before = process.memory_info().rss
    registry = registry_for(kind, settings_kw, embedder)
    await registry.start()
    name = f"bench{n}"
    start = time.perf_counter()
    for i in range(0, n, 1000):
        await registry.add_precomputed(name, texts[i:i + 1000], vectors[i:i + 1000],
                                       [{"i": j} for j in range(i, min(i + 1000, n))])
        if (i // 1000) % 100 == 99:
            say(f"loaded {i + 1000:,} chunks ({(i + 1000) / (time.perf_counter() - start):,.0f}/s)")
    load_s = time.perf_counter() - start
    adapter = getattr(getattr(registry, "inner", registry), "adapter", None)
    physical = (await registry.book(name)).live_version.physical if adapter is not None else name
    build_s = 0.0
    if hasattr(adapter, "build_hnsw"):  # PostgreSQL: the HNSW index after the load, in one pass
        say(f"loaded in {load_s:.0f} s; building the HNSW index")
        t0 = time.perf_counter()
        await asyncio.to_thread(adapter.build_hnsw, physical)
        build_s = time.perf_counter() - t0
    keyword_load_s = 0.0
    if getattr(adapter, "mirrors", None) is not None:  # PostgreSQL: this replica's in-memory keyword index
        t0 = time.perf_counter()
        await asyncio.to_thread(adapter.warm_keyword, physical)
        keyword_load_s = time.perf_counter() - t0
        say(f"keyword index loaded in {keyword_load_s:.1f} s")
    settle_s, vacuums = 0.0, 0
    if kind == "postgres":
        settle_s = await asyncio.to_thread(settle, adapter)
        vacuums = await asyncio.to_thread(autovacuums, adapter)
        say(f"server settled in {settle_s:.0f} s")
    say("querying")
    registry.settings.hybrid = True
    for q, t in warmup:
        await registry.retrieve(name, t, 10, query_embedding=q)
    rounds = [(q, t) for _ in range(ROUNDS) for q, t in zip(queries, query_texts, strict=True)]
    fused = [await timed(registry.retrieve, name, t, 10, query_embedding=q) for q, t in rounds]
    wide = [await timed(registry.retrieve, name, t, 300, query_embedding=q)
            for q, t in zip(queries[:20], query_texts[:20], strict=True)]
    legs: dict[str, list[float]] = {"dense": [], "keyword": []}
    if adapter is not None:  # the shared stores' legs, under the index's live version (FAISS keeps them in-process)
        for q, t in rounds:
            legs["dense"].append(await timed(asyncio.to_thread, adapter.dense, physical, q, 10, None))
            legs["keyword"].append(await timed(asyncio.to_thread, adapter.keyword, physical, t, q, 10, None))
        if getattr(adapter, "mirrors", None) is not None:  # the SQL leg, for comparison (filtered queries use it)
            mirrors, adapter.mirrors = adapter.mirrors, None
            legs["keyword_sql"] = [await timed(asyncio.to_thread, adapter.keyword, physical, t, q, 10, None)
                                   for q, t in zip(queries, query_texts, strict=True)]
            adapter.mirrors = mirrors
    registry.settings.hybrid = False
    if kind == "postgres":  # did an autovacuum share the 2 cores with the searches just timed?
        vacuums = await asyncio.to_thread(autovacuums, adapter) - vacuums
        say(f"autovacuum runs while querying: {vacuums}")
    rss = process.memory_info().rss
    exact = np.argsort(-(vectors @ queries.T), axis=0)[:10].T

    recall, _ = await dense_recall(registry, name, texts, query_texts, queries, exact)
    curve = []
    if n >= 100_000 and kind != "milvus":  # HNSW: recall and latency against the search breadth
        for ef in EF_CURVE:
            set_ef(registry, adapter, physical, ef)
            r, took = await dense_recall(registry, name, texts, query_texts, queries, exact)
            curve.append({"ef_search": ef, "recall_at_10": r, "dense_p99_ms": pct(took, 99)})
            say(f"ef_search {ef}: recall@10 {r:.3f}, dense p99 {pct(took, 99):.1f} ms")
    disk = disk_bytes(kind, settings_kw, adapter)
    await registry.delete_index(name)
    await registry.close()
    embedder.close()
    return {"store": kind, "chunks": n, "load_chunks_per_s": n / load_s, "hnsw_build_s": build_s,
            "keyword_load_s": keyword_load_s, "settle_s": settle_s, "autovacuums_while_querying": vacuums,
            "warmup_queries": WARMUP,
            "write_chunks_per_s": n / (load_s + build_s),
            "retrieve_p50_ms": pct(fused, 50), "retrieve_p99_ms": pct(fused, 99),
            "top300_p50_ms": pct(wide, 50), "top300_p99_ms": pct(wide, 99),
            **{f"{leg}_p{q}_ms": pct(v, q) for leg, v in legs.items() for q in (50, 99) if v},
            "recall_at_10": recall, "ef_curve": curve, "index_rss_mib": (rss - rss_before) / 2**20,
            "engine_rss_mib": rss / 2**20, "disk_mib": disk / 2**20}


def row_in_child(kind: str, n: int, url: str, tmp: Path) -> dict:
    """``measure`` in a fresh process (its RSS is the row's alone); progress goes to stderr as it runs."""
    kw: dict = {"data_dir": str(tmp / f"{kind}{n}")}
    if kind == "postgres":
        kw |= {"vector_store_url": url, "vector_store_prefix": f"bench{n}", "store_build_memory_mb": 3072}
    if kind == "milvus":
        kw |= {"vector_store_url": str(tmp / f"milvus{n}.db"), "vector_store_prefix": f"bench{n}"}
    row = json.dumps({"kind": kind, "n": n, "settings": kw})
    out = subprocess.run([sys.executable, "-m", "bench.bench_stores", "--row", row], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


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
    parser.add_argument("--quick", action="store_true", help="10k and 100k chunks (no 1M rows), replicas 1-2")
    parser.add_argument("--no-replicas", action="store_true", help="skip the multi-process throughput part")
    parser.add_argument("--stores", nargs="*", default=["faiss", "faiss-sq8", "postgres", "milvus"],
                        help="stores to measure")
    parser.add_argument("--keep", action="store_true",
                        help="keep the rows of bench/results/stores.json that this run does not measure again")
    parser.add_argument("--sizes", nargs="*", type=int, help="chunk counts (default: 10k, 100k, 1M; --quick: 10k, 100k)")
    parser.add_argument("--milvus-max-chunks", type=int, default=10_000,
                        help="Milvus Lite above this size is skipped: its search took 1.4 s p50 at 10k chunks here, "
                             "so 100k would take hours (a Milvus cluster is what to measure at that size)")
    parser.add_argument("--pg-shared-buffers", default="4GB",
                        help="PostgreSQL's shared_buffers: its own cache, where the HNSW index should fit (pgvector's "
                             "advice; PostgreSQL's is a quarter of RAM). The server's default, 128MB, is measured in "
                             "docs/stores.md too")
    parser.add_argument("--report", action="store_true",
                        help="measure nothing: print the tables and draw the plot from bench/results/stores.json")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # one row, in a child process (row_in_child)
    args = parser.parse_args()
    if args.row:
        spec = json.loads(args.row)
        print(json.dumps(asyncio.run(measure(spec["kind"], spec["settings"], spec["n"]))))
        return 0
    sizes = args.sizes or ((10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000))
    replica_counts = (1, 2) if args.quick else (1, 2, 3)
    out = RESULTS / "stores.json"
    if args.report:
        report(json.loads(out.read_text()))
        return 0
    results: dict = {"stores": [], "replicas": []}
    if args.keep and out.exists():
        old = json.loads(out.read_text())
        measured = {(kind, n, args.pg_shared_buffers if kind == "postgres" else None) for kind in args.stores for n in sizes}
        results = {"stores": [r for r in old["stores"] if (r["store"], r["chunks"], r.get("shared_buffers")) not in measured],
                   "replicas": [] if not args.no_replicas else old.get("replicas", [])}
    with postgres_server(settings={"shared_buffers": args.pg_shared_buffers}) as sa_url, \
            tempfile.TemporaryDirectory() as tmp_name:
        url, tmp = sa_url.replace("postgresql+psycopg://", "postgresql://"), Path(tmp_name)
        for n in sizes:
            for kind in args.stores:
                if kind == "milvus" and n > args.milvus_max_chunks:
                    print(f"milvus    {n:>9,} chunks: skipped (--milvus-max-chunks {args.milvus_max_chunks})", flush=True)
                    continue
                started = time.monotonic()
                row = row_in_child(kind, n, url, tmp)
                if kind == "postgres":
                    row["shared_buffers"] = args.pg_shared_buffers
                results["stores"].append(row)
                print(f"{kind:9} {n:>9,} chunks ({time.monotonic() - started:.0f} s): {fmt_row(row)}", flush=True)
        if not args.no_replicas:
            from ragengine.embedding import build_embedder
            from ragengine.settings import EngineSettings

            embedder = build_embedder(EngineSettings())
            texts = passages(2000, seed=3)
            reg = registry_for("postgres", {"vector_store_url": url, "vector_store_prefix": "replicas",
                                            "data_dir": tmp / "r"}, embedder)

            async def seed() -> None:
                await reg.start()
                await reg.add_precomputed("shared", texts, embedder.embed_texts_sync(texts))
                await reg.close()

            asyncio.run(seed())
            embedder.close()
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
    results["stores"].sort(key=lambda r: (r["chunks"], r["store"]))
    write_result(out, results, indent=1)
    report(results)
    print(f"\nwrote {out.relative_to(ROOT)} and docs/images/stores-scale.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
