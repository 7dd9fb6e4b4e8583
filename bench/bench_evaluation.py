"""What an evaluation costs (docs/evaluation.md): one real ``ragengine serve`` (FAISS, the packaged model)
holding N one-chunk passages.

1. 200 questions (a few words of a passage each; that passage is the relevant document) asked one after the
   other as ``/retrieve`` calls by an HTTP client: the client's own evaluation.
2. The same 200 as one golden set, ``POST /indexes/bench/evaluations``, until the run has succeeded: the
   product's. Steps 1 and 2 alternate ``--rounds`` times (the machine is shared: the load moves); the
   overhead is the ratio of their medians.
3. ``/retrieve`` latency of a client that queries without pause: idle, then while an evaluation of
   ``--long`` questions runs (an evaluation must never make serving queries wait; under such traffic a run
   asks one question a second, between requests).

    .venv/bin/python -m bench.bench_evaluation            # 5,000 chunks
    .venv/bin/python -m bench.bench_evaluation --quick    # 1,000 chunks

Writes bench/results/evaluation.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench.common import RESULTS, ROOT, pct, write_result
from bench.engine.synth import passages
from tests.support.engine_process import engine_process
from tests.support.versions import QueryLoop

K = 10


def golden(texts: list[str], n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for qid, i in enumerate(rng.choice(len(texts), size=n, replace=False)):
        words = texts[int(i)].split()[2:]
        start = int(rng.integers(0, max(1, len(words) - 6)))
        out.append({"id": f"q{qid}", "question": " ".join(words[start:start + 6]), "relevant_doc_ids": [f"p{int(i)}"]})
    return out


def evaluate(base: str, questions: list[dict]) -> tuple[float, dict]:
    started = time.perf_counter()
    resp = httpx.post(f"{base}/indexes/bench/evaluations", json={"questions": questions, "top_k": K}, timeout=60)
    resp.raise_for_status()
    run_id = resp.json()["id"]
    while (run := httpx.get(f"{base}/indexes/bench/evaluations/{run_id}", timeout=60).json())["status"] in (
            "queued", "running"):
        time.sleep(0.02)
    assert run["status"] == "succeeded", run
    return time.perf_counter() - started, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunks", type=int, help="passages in the index (default 5,000; --quick 1,000)")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--long", type=int, default=60, help="questions of the run measured under traffic")
    args = parser.parse_args()
    n = args.chunks or (1_000 if args.quick else 5_000)
    texts = passages(n, words=(20, 40), seed=n)
    questions = golden(texts, args.questions, seed=1)
    row: dict = {"chunks": n, "questions": len(questions), "top_k": K}
    with tempfile.TemporaryDirectory() as tmp, engine_process(Path(tmp), llm=False) as engine:
        base = engine.base_url
        for i in range(0, n, 500):
            docs = [{"doc_id": f"p{j}", "text": t} for j, t in enumerate(texts[i:i + 500], start=i)]
            httpx.post(f"{base}/index", json={"index_name": "bench", "documents": docs}, timeout=600).raise_for_status()
        clients, evaluations = [], []
        with httpx.Client(timeout=60) as client:
            for q in questions[:10]:  # warm-up
                client.post(f"{base}/retrieve", json={"index_name": "bench", "query": q["question"], "max_node_count": K})
            for _ in range(args.rounds):
                started = time.perf_counter()
                for q in questions:
                    client.post(f"{base}/retrieve", json={"index_name": "bench", "query": q["question"],
                                                          "max_node_count": K}).raise_for_status()
                clients.append(time.perf_counter() - started)
                time.sleep(0.5)  # the engine idle again: a run goes at full speed
                took, run = evaluate(base, questions)
                evaluations.append(took)
        row["client_rounds_s"], row["evaluation_rounds_s"] = clients, evaluations
        row["client_s"], row["evaluation_s"] = float(np.median(clients)), float(np.median(evaluations))
        row["ratio"] = row["evaluation_s"] / row["client_s"]
        row["metrics"] = run["metrics"]

        body = {"index_name": "bench", "query": questions[0]["question"], "max_node_count": K}
        long_set = golden(texts, min(args.long, n), seed=2)
        with QueryLoop(base, body) as loop:
            loop.wait_for(lambda a: a.status == 200)
            start = time.time()
            time.sleep(5.0 if args.quick else 15.0)
            idle = [a.ms for a in loop.answers if a.at >= start]
            during_from = time.time()
            row["long_evaluation_s"], _ = evaluate(base, long_set)
            during = [a.ms for a in loop.answers if a.at >= during_from]
        row.update(idle_p50_ms=pct(idle, 50), idle_p95_ms=pct(idle, 95), idle_p99_ms=pct(idle, 99),
                   idle_queries=len(idle), during_p50_ms=pct(during, 50), during_p95_ms=pct(during, 95),
                   during_p99_ms=pct(during, 99), during_queries=len(during),
                   failed_queries=sum(a.status != 200 for a in loop.answers), long_questions=len(long_set))
    print(json.dumps(row, indent=1))
    print("\n| chunks | questions | /retrieve calls (s, median) | evaluation (s, median) | ratio | /retrieve p50 / p95 / "
          "p99 idle (ms) | during an evaluation (ms) | failed |\n|---|---|---|---|---|---|---|---|")
    print(f"| {n:,} | {row['questions']} | {row['client_s']:.2f} | {row['evaluation_s']:.2f} | {row['ratio']:.2f} | "
          f"{row['idle_p50_ms']:.1f} / {row['idle_p95_ms']:.1f} / {row['idle_p99_ms']:.1f} | "
          f"{row['during_p50_ms']:.1f} / {row['during_p95_ms']:.1f} / {row['during_p99_ms']:.1f} | "
          f"{row['failed_queries']} |")
    out = RESULTS / "evaluation.json"
    write_result(out, row, indent=1)
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 1 if row["failed_queries"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
