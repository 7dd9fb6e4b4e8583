"""Conversation benchmarks: the latency reformulation adds, and session-store throughput.

1. Reformulation: ``reformulate_query`` against the scripted OpenAI-compatible test LLM (zero model
   latency, real HTTP on loopback), with history (one LLM round trip) and without (no call); the
   difference is what ``reformulate: true`` adds to a message before retrieval, minus the model's
   own generation time.
2. Session store: messages/s appended one at a time and by 8 concurrent writers, and thread-history
   reads/s, on SQLite (file, WAL) and on a throwaway PostgreSQL server (skipped with a note when the
   binaries are absent). The row "sqlite (sync=NORMAL)" is the same store with the WAL fsync'ed only at
   checkpoints (the setting before every commit was fsync'ed): what power-loss durability costs.

    .venv/bin/python -m bench.bench_conversations [--quick]

Prints a table and writes bench/results/conversations.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

from bench.common import RESULTS, ROOT, pct, write_result
from ragengine.conversations.store import SessionStore
from ragengine.llm.client import LLMClient
from ragengine.rag.reformulate import reformulate_query
from ragengine.settings import EngineSettings
from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app
from tests.support.server import serve_app

HISTORY = [
    {"role": "user", "content": "I want something vegetarian"},
    {"role": "assistant", "content": "I can recommend the Mushroom Soup, the Chickpea Risotto and the Creamy Spinach"},
]


async def bench_reformulation(base: str, n: int) -> dict:
    settings = EngineSettings(llm_url=base, llm_model="scripted")
    llm = LLMClient(settings)
    try:
        for _ in range(5):  # warm connections and model discovery
            await reformulate_query(llm, settings, "Which is quickest?", HISTORY)
        out = {}
        for label, history in (("without (no history: no call)", []), ("with (1 LLM round trip)", HISTORY)):
            times = []
            for _ in range(n):
                t = time.perf_counter()
                await reformulate_query(llm, settings, "From those, which is the quickest to cook?", history)
                times.append((time.perf_counter() - t) * 1000)
            out[label] = {"n": n, "mean_ms": statistics.mean(times), "p50_ms": pct(times, 50), "p95_ms": pct(times, 95)}
        return out
    finally:
        await llm.aclose()


async def bench_store(url: str, n: int) -> dict:
    store = SessionStore(url)
    store.create_tables()
    try:
        s = await store.create_session(user_id="bench")
        t = time.perf_counter()
        for i in range(n):
            await store.add_message(s.id, "main", "user" if i % 2 == 0 else "assistant", f"message {i} " * 20)
        seq = n / (time.perf_counter() - t)
        s2 = await store.create_session(user_id="bench")
        writers, per = 8, max(1, n // 8)
        t = time.perf_counter()
        await asyncio.gather(*(
            asyncio.gather(*[store.add_message(s2.id, "main", "user", f"w{w} m{i}") for i in range(per)])
            for w in range(writers)
        ))
        conc = writers * per / (time.perf_counter() - t)
        reads = max(10, n // 10)
        t = time.perf_counter()
        for _ in range(reads):
            await store.history(s.id, last=20)
        hist = reads / (time.perf_counter() - t)
        await store.delete_session(s.id)
        await store.delete_session(s2.id)
        return {"append_msgs_per_s": seq, "concurrent8_msgs_per_s": conc, "history_reads_per_s": hist, "n": n}
    finally:
        store.close()


@contextlib.contextmanager
def synchronous_normal() -> Iterator[None]:
    """SessionStores made meanwhile run SQLite with synchronous=NORMAL (set after the store's own pragmas)."""
    from sqlalchemy import event

    from ragengine.conversations import database as store_module

    original = store_module.make_engine

    def make(url: str):
        engine = original(url)

        @event.listens_for(engine, "connect")
        def _normal(conn, _record) -> None:
            cur = conn.cursor()
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine

    store_module.make_engine = make
    try:
        yield
    finally:
        store_module.make_engine = original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_ref, n_msgs = (50, 300) if args.quick else (200, 1500)
    results: dict = {"quick": args.quick}

    llm = ScriptedLLM(model="scripted", reply=lambda body: "Considering the Mushroom Soup, the Chickpea Risotto "
                      "and the Creamy Spinach, which is the quickest to cook?")
    with serve_app(create_scripted_app(llm), ready_path="/health") as base:
        results["reformulation"] = asyncio.run(bench_reformulation(base + "/v1", n_ref))
    ref = results["reformulation"]
    added = ref["with (1 LLM round trip)"]["p50_ms"] - ref["without (no history: no call)"]["p50_ms"]
    results["reformulation_added_p50_ms"] = added

    stores: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores["sqlite"] = asyncio.run(bench_store(f"sqlite:///{tmp}/sessions.db", n_msgs))
    with tempfile.TemporaryDirectory() as tmp, synchronous_normal():
        stores["sqlite (sync=NORMAL)"] = asyncio.run(bench_store(f"sqlite:///{tmp}/sessions.db", n_msgs))
    try:
        from tests.support.postgres import postgres_server

        with postgres_server() as url:
            stores["postgresql"] = asyncio.run(bench_store(url, n_msgs))
    except RuntimeError as exc:
        stores["postgresql"] = {"skipped": str(exc)}
    results["store"] = stores

    print("\nReformulation latency (scripted LLM, zero model time, loopback HTTP)")
    print(f"{'case':<34}{'n':>6}{'mean ms':>10}{'p50 ms':>10}{'p95 ms':>10}")
    for label, r in ref.items():
        print(f"{label:<34}{r['n']:>6}{r['mean_ms']:>10.2f}{r['p50_ms']:>10.2f}{r['p95_ms']:>10.2f}")
    print(f"added by reformulation (p50): {added:.2f} ms + the model's generation time")
    print("\nSession store")
    print(f"{'backend':<22}{'append msg/s':>14}{'8 writers msg/s':>17}{'history reads/s':>17}")
    for name, r in stores.items():
        if "skipped" in r:
            print(f"{name:<22}  skipped: {r['skipped']}")
        else:
            print(f"{name:<22}{r['append_msgs_per_s']:>14.0f}{r['concurrent8_msgs_per_s']:>17.0f}"
                  f"{r['history_reads_per_s']:>17.0f}")
    out = RESULTS / "conversations.json"
    write_result(out, results)
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
