"""FAISS index memory against its size, with and without 8-bit vector codes, and what the codes cost in recall.

    .venv/bin/python -m bench.bench_memory            # 100k to 1M chunks, both compressions (long: ~2 M writes)
    .venv/bin/python -m bench.bench_memory --quick    # 100k to 300k chunks
    .venv/bin/python -m bench.bench_memory --report   # the tables from bench/results/memory.json

The curve: per compression (``vector_compression`` none, sq8), one fresh process grows one index through the
engine's own write path (``add_precomputed``: docstore, texts, metadata, BM25, journal, snapshots, the flat to
HNSW migration at ``hnsw_threshold``) 1,000 chunks at a time, to 1M chunks. Chunks are bench/engine/synth.py's
(20 to 40 words of a Zipf vocabulary; the clustered unit vectors of the stores bench, no embedding model run),
made batch by batch so that the engine's copy is the only one in the process. Every 100k chunks:
- memory: the process's RSS minus its RSS before the index existed (after the embedding model loaded). RSS, not
  tracemalloc: FAISS allocates in C++, where tracemalloc sees nothing, and RSS (with the allocator's slack) is
  what a pod's memory limit counts. FAISS's own structures (``VectorStore.memory_bytes``: vectors or codes and
  the HNSW graph) are given apart; the rest is the docstore, texts, metadata and BM25;
- disk: the index folder after a snapshot (what a restart reads);
- dense recall@10 of the engine's search (``VectorStore.search``, the default ef_search) against an exact
  search of the float vectors, for 100 queries made as bench_stores.py makes them.
Then bench/memory_recall.py measures the codes' cost on real embeddings (the packaged MiniLM) and on the
retrieval evaluation's sets (recall@10 and nDCG@10 of relevant documents, as `make eval` scores them).
Writes bench/results/memory.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, ROOT, machine, rss_mib, write_result

STEP = 100_000  # a row of the curve every STEP chunks
BATCH = 1000  # chunks per write, as the stores bench loads them
QUERIES = 100
OUT = RESULTS / "memory.json"
COMPRESSIONS = ("none", "sq8")


class ExactTop:
    """Each query's exact top ``k`` (by inner product) over vectors given batch by batch."""

    def __init__(self, queries: np.ndarray, k: int = 10) -> None:
        self.queries, self.k = queries, k
        self.ids = np.zeros((len(queries), 0), dtype=np.int64)
        self.sims = np.zeros((len(queries), 0), dtype=np.float32)

    def add(self, batch: np.ndarray, first: int) -> None:
        sims = np.concatenate([self.sims, self.queries @ batch.T], axis=1)
        ids = np.concatenate([self.ids, np.broadcast_to(np.arange(first, first + len(batch)), (len(sims), len(batch)))],
                             axis=1)
        top = np.argsort(-sims, axis=1, kind="stable")[:, : self.k]
        self.sims, self.ids = np.take_along_axis(sims, top, 1), np.take_along_axis(ids, top, 1)


def recall_at(found: list[np.ndarray], truth: np.ndarray) -> float:
    """The share of each query's true neighbours (rows of ``truth``) that ``found`` holds."""
    hits = sum(len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return hits / truth.size


def per_100k(rows: list[dict], key: str) -> float:
    """MiB per 100k more chunks: the slope of ``key`` from the first row to the last."""
    first, last = rows[0], rows[-1]
    return (last[key] - first[key]) / (last["chunks"] - first["chunks"]) * STEP if last is not first else float("nan")


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def curve(compression: str, top: int, data_dir: Path) -> list[dict]:
    """One index grown to ``top`` chunks with ``compression``, measured every STEP chunks (in this process)."""
    from bench.bench_stores import registry_for
    from bench.common import load_embedder
    from bench.engine.synth import clustered_unit_batches, passages

    embedder = load_embedder()  # the engine's registry wants one (the model's dimension); no chunk is embedded
    rng = np.random.default_rng(7)
    batches = clustered_unit_batches(top, embedder.dim, seed=top, step=BATCH)
    gc.collect()
    before = rss_mib("self")
    registry = registry_for("faiss", {"data_dir": str(data_dir), "vector_compression": compression}, embedder)
    await registry.start()
    picks, queries, exact = None, None, None
    rows, started = [], time.perf_counter()
    for first, vectors in zip(range(0, top, BATCH), batches, strict=True):
        if picks is None:  # queries near vectors of the first batch, as bench_stores.py makes them
            picks = rng.integers(0, len(vectors), QUERIES)
            queries = vectors[picks] + 0.05 * rng.standard_normal((QUERIES, vectors.shape[1])).astype(np.float32)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            exact = ExactTop(queries)
        exact.add(vectors, first)
        texts = passages(len(vectors), seed=first + 1, first=first)
        await registry.add_precomputed("curve", texts, vectors, [{"i": first + j} for j in range(len(vectors))])
        del texts, vectors
        if (first + BATCH) % STEP:
            continue
        n = first + BATCH
        state = registry.inner.get((await registry.book("curve")).live_version.physical)
        gc.collect()
        rss = rss_mib("self") - before
        with state.rw.read():
            found = [state.store.search(q, 10)[0] for q in queries]
        await registry.inner.durability.snapshot(state)
        rows.append({"chunks": n, "compression": compression, "kind": state.store.kind,
                     "compressed": state.store.compressed, "rss_mib": rss,
                     "faiss_mib": state.store.memory_bytes() / 2**20, "disk_mib": folder_bytes(data_dir) / 2**20,
                     "recall_at_10": recall_at(found, exact.ids), "elapsed_s": time.perf_counter() - started})
        print(f"  {compression} {n:>9,}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    await registry.close()
    embedder.close()
    return rows


def curve_in_child(compression: str, top: int) -> list[dict]:
    """``curve`` in a fresh process (its RSS is the index's alone); progress goes to stderr as it runs."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-m", "bench.bench_memory", "--curve", compression, "--top", str(top),
                              "--data-dir", tmp], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def report(results: dict) -> None:
    """The curve (none beside sq8 at each size) and the recall tables."""
    by = {c: {r["chunks"]: r for r in results["curve"] if r["compression"] == c} for c in COMPRESSIONS}
    sizes = sorted(set(by["none"]) & set(by["sq8"]))
    print(f"\n=== FAISS index memory ({results.get('machine', '-')}) ===")
    if results.get("curve_note"):
        print(results["curve_note"])
    print("| chunks | MiB none | MiB sq8 | sq8 saves | MiB per 100k chunks none / sq8 | FAISS part none / sq8 (MiB) "
          "| disk none / sq8 (MiB) | dense recall@10 none / sq8 |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        a, b = by["none"][n], by["sq8"][n]
        print(f"| {n:,} | {a['rss_mib']:,.0f} | {b['rss_mib']:,.0f} | {1 - b['rss_mib'] / a['rss_mib']:.0%} "
              f"| {a['rss_mib'] / n * STEP:,.0f} / {b['rss_mib'] / n * STEP:,.0f} "
              f"| {a['faiss_mib']:,.0f} / {b['faiss_mib']:,.0f} | {a['disk_mib']:,.0f} / {b['disk_mib']:,.0f} "
              f"| {a['recall_at_10']:.3f} / {b['recall_at_10']:.3f} |")
    if len(sizes) > 1:
        rows = {c: [by[c][n] for n in sizes] for c in COMPRESSIONS}
        print(f"slope from {sizes[0]:,} to {sizes[-1]:,} chunks: "
              + ", ".join(f"{c} {per_100k(rows[c], 'rss_mib'):,.0f} MiB (disk {per_100k(rows[c], 'disk_mib'):,.0f})"
                          for c in COMPRESSIONS) + " per 100k chunks")
    if results.get("recall"):
        from bench.memory_recall import report as recall_report

        recall_report(results["recall"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the curve to 300k chunks; the recall part smaller")
    parser.add_argument("--report", action="store_true", help="measure nothing: print bench/results/memory.json")
    parser.add_argument("--skip-curve", action="store_true", help="keep the curve of memory.json; measure recall")
    parser.add_argument("--skip-recall", action="store_true", help="keep the recall of memory.json; measure the curve")
    parser.add_argument("--curve", choices=COMPRESSIONS, help=argparse.SUPPRESS)  # one curve, in a child process
    parser.add_argument("--top", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.curve:
        print(json.dumps(asyncio.run(curve(args.curve, args.top, Path(args.data_dir)))))
        return 0
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    if args.report:
        report(old)
        return 0
    results = {"machine": machine(), "quick": args.quick, "curve": old.get("curve", []), "recall": old.get("recall")}
    if not args.skip_curve:
        top = (3 if args.quick else 10) * STEP
        results["curve"] = [row for c in COMPRESSIONS for row in curve_in_child(c, top)]
        write_result(OUT, results, indent=1)
    if not args.skip_recall:
        from bench.memory_recall import measure

        results["recall"] = asyncio.run(measure(quick=args.quick))
    latest = json.loads(OUT.read_text()) if OUT.exists() else {}  # a run of the other part may have ended since
    if args.skip_curve:
        results["curve"] = latest.get("curve", [])
    if args.skip_recall:
        results["recall"] = latest.get("recall")
    write_result(OUT, results, indent=1)
    report(results)
    print(f"\nwrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
