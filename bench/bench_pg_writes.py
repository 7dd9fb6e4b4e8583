"""PostgreSQL hybrid search under writes (issue 45): p50 / p99 with and without a writer, across two replicas.

    .venv/bin/python -m bench.bench_pg_writes [--chunks 100000] [--quick] [--source DIR]

One throwaway PostgreSQL 18 + pgvector (tests/support/postgres.py). ``--chunks`` chunks (synthetic passages,
clustered unit vectors: bench/engine/synth.py) are loaded through the registry's write path and the HNSW index
is built. Two replicas (``VersionedRegistry`` over ``PostgresStore``, each with its own keyword mirror) run in
this process; a writer process (a third replica) adds 10 chunks every 100 ms (100 chunks/s) while it runs.
Hybrid top-10 searches (the query vector given: store + fusion, no embedding, no HTTP, as bench_stores.py),
one at a time, alternate between the replicas: 300 without the writer, then 300 with it. Printed: p50 / p99 per
phase, how many searches the SQL keyword leg answered (a mirror that could not), and what each path of the
mirrors applied. ``--source DIR``: another checkout's engine (``git archive <rev> engine``), for a before/after
on one machine. Writes bench/results/pg_writes.json. On a shared 2-core machine the writer, PostgreSQL and the
searches share the cores: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, ROOT, pct, write_result

OUT = RESULTS / "pg_writes.json"
DIM = 384
SEARCHES = 300
WRITE_EVERY_S = 0.1
WRITE_CHUNKS = 10


def registry(url: str, data_dir: Path, embedder=None):
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings
    from ragengine.versions import build_registry

    settings = EngineSettings(data_dir=data_dir, vector_store="postgres", vector_store_url=url,
                              vector_store_prefix="writes", store_build_memory_mb=1024)
    return build_registry(settings, embedder or build_embedder(settings))


async def writer(url: str, data_dir: str, seconds: float) -> None:
    """A replica that adds WRITE_CHUNKS chunks every WRITE_EVERY_S for ``seconds`` (the clock decides, not the
    writes' own pace); prints how many it wrote and how late it fell."""
    from bench.engine.synth import clustered_unit_vectors, passages

    reg = registry(url, Path(data_dir))
    await reg.start()
    texts = passages(int(seconds / WRITE_EVERY_S + 10) * WRITE_CHUNKS, seed=99)
    vectors = clustered_unit_vectors(len(texts), DIM, seed=99)
    start, written, late = time.perf_counter(), 0, 0.0
    tick = 0
    while time.perf_counter() - start < seconds:
        due = start + tick * WRITE_EVERY_S
        if (wait := due - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        else:
            late = max(late, -wait)
        await reg.add_precomputed("kb", texts[written:written + WRITE_CHUNKS], vectors[written:written + WRITE_CHUNKS])
        written += WRITE_CHUNKS
        tick += 1
    await reg.close()
    print(json.dumps({"written": written, "seconds": time.perf_counter() - start, "most_late_s": late}), flush=True)


async def chunk_count(reg, physical: str) -> int:
    from sqlalchemy import select

    adapter = reg.inner.adapter
    i = adapter.t.indexes
    with adapter.engine.connect() as conn:
        return int(conn.execute(select(i.c.chunk_count).where(i.c.name == physical)).scalar_one())


async def wait_for_writes(reg, physical: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    start = await chunk_count(reg, physical)
    deadline = time.monotonic() + timeout_s
    while await chunk_count(reg, physical) < start + 5 * WRITE_CHUNKS:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the writer did not write: {proc.communicate(timeout=10)[1][-3000:]}")
        await asyncio.sleep(0.2)


def mirror_stats(reg) -> dict:
    mirrors = getattr(reg.inner.adapter, "mirrors", None)
    return {"applied": dict(getattr(mirrors, "applied", {})),
            "largest_search_catch_up": getattr(mirrors, "largest_search_catch_up", None)}


async def measure(url: str, chunks: int, work: Path, source: Path) -> dict:
    from bench.engine.synth import clustered_unit_vectors, passages
    from ragengine.stores.postgres import store as pg_store

    sql_calls = [0]
    real = pg_store.keyword_leg.search

    def counted(*args, **kwargs):
        sql_calls[0] += 1
        return real(*args, **kwargs)

    pg_store.keyword_leg.search = counted
    a = registry(url, work / "a")
    b = registry(url, work / "b", a.embedder)
    await a.start()
    await b.start()
    texts = passages(chunks, seed=chunks)
    vectors = clustered_unit_vectors(chunks, DIM, seed=chunks)
    t0 = time.perf_counter()
    for i in range(0, chunks, 1000):
        await a.add_precomputed("kb", texts[i:i + 1000], vectors[i:i + 1000])
    load_s = time.perf_counter() - t0
    physical = (await a.book("kb")).live_version.physical
    await asyncio.to_thread(a.inner.adapter.build_hnsw, physical)
    for reg in (a, b):
        await asyncio.to_thread(reg.inner.adapter.warm_keyword, physical)
        reg.settings.hybrid = True
    rng = np.random.default_rng(7)
    picks = rng.integers(0, chunks, SEARCHES)
    queries = vectors[picks] + 0.05 * rng.standard_normal((SEARCHES, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    words = [" ".join(texts[i].split()[2:8]) for i in picks]
    for i in range(20):  # warm-up: pooled connections, the server's caches
        await (a, b)[i % 2].retrieve("kb", words[-i], 10, query_embedding=queries[-i])

    async def phase() -> dict:
        calls = sql_calls[0]
        took = []
        for i, (q, w) in enumerate(zip(queries, words, strict=True)):
            t = time.perf_counter()
            await (a, b)[i % 2].retrieve("kb", w, 10, query_embedding=q)
            took.append((time.perf_counter() - t) * 1000)
        return {"p50_ms": round(pct(took, 50), 2), "p99_ms": round(pct(took, 99), 2), "max_ms": round(max(took), 2),
                "sql_keyword_answers": sql_calls[0] - calls, "load_average": round(os.getloadavg()[0], 2)}

    quiet = await phase()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source / "engine"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    seconds = 600
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_pg_writes", "--writer", url, str(work / "w"), str(seconds)],
                            cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        await wait_for_writes(a, physical, proc)  # the writer's start: its registry, its first writes
        before = await chunk_count(a, physical)
        t0 = time.perf_counter()
        writing = await phase()
        writing["writer_chunks_per_s"] = round((await chunk_count(a, physical) - before) / (time.perf_counter() - t0), 1)
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    if proc.returncode not in (0, -15):
        raise RuntimeError(f"the writer failed: {err[-3000:]}")
    result = {"chunks": chunks, "load_chunks_per_s": round(chunks / load_s), "searches_per_phase": SEARCHES,
              "quiet": quiet, "writing": writing, "mirrors": {"a": mirror_stats(a), "b": mirror_stats(b)}}
    for reg in (a, b):
        await reg.close()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="20,000 chunks")
    ap.add_argument("--source", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--writer", nargs=3, metavar=("URL", "DATA_DIR", "SECONDS"), help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=3, metavar=("URL", "CHUNKS", "WORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        asyncio.run(writer(args.writer[0], args.writer[1], float(args.writer[2])))
        return 0
    if args.child:  # the measurement, in a process whose engine is --source's
        result = asyncio.run(measure(args.child[0], int(args.child[1]), Path(args.child[2]), args.source))
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    import tempfile

    from tests.support.postgres import postgres_server

    chunks = 20_000 if args.quick else args.chunks
    source = args.source.resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source / "engine"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with postgres_server(settings={"shared_buffers": "512MB"}) as url, tempfile.TemporaryDirectory() as work:
        out = subprocess.run([sys.executable, "-m", "bench.bench_pg_writes", "--source", str(source), "--child", url, str(chunks),
                              work], cwd=ROOT, env=env, capture_output=True, text=True)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(out.stdout[-3000:], out.stderr[-5000:], file=sys.stderr)
        return 1
    result = json.loads(line[7:]) | {"source": "this checkout" if source == ROOT else str(source)}
    write_result(args.out, result)
    print(f"\nPostgreSQL hybrid top-10 at {chunks:,} chunks, two replicas, one search at a time ({result['source']})")
    print(f"{'phase':<36} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'SQL keyword answers':>20} {'load':>6}")
    print(f"(the writer wrote {result['writing']['writer_chunks_per_s']} chunks/s while the searches ran)")
    for key, label in (("quiet", "no writer"), ("writing", "writer at 100 chunks/s (3rd replica)")):
        r = result[key]
        print(f"{label:<36} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['max_ms']:>8} {r['sql_keyword_answers']:>20} "
              f"{r['load_average']:>6}")
    print(f"keyword mirrors (chunks applied by path): {result['mirrors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
