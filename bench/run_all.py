"""Run every benchmark in turn; each prints its own table and writes bench/results/<name>.json.

    .venv/bin/python -m bench.run_all              # full runs, from the repository's root
    .venv/bin/python -m bench.run_all --quick      # smaller sizes, a few minutes in all
    .venv/bin/python -m bench.run_all engine chat  # a subset
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.common import RESULTS, ROOT

# Issue 13's side-by-side measurement of KAITO's RAG service (same machine type, same workload), for reference.
KAITO = {"retrieve": "229 / 659 ms", "chat_seq": "47 / 89 ms", "chat_c16": "22.1 req/s", "ingest": "18.7 passages/s",
         "startup": "8.0 s", "rss": "1828 MiB"}
BENCHES = {
    "engine": "bench_engine",
    "chat": "bench_chat",
    "conversations": "bench_conversations",
    "operator": "bench_operator",
    "failure_report": "bench_failure_report",
    "stores": "bench_stores",
    "memory": "bench_memory",  # FAISS index memory per 100k chunks, none against sq8, and sq8's recall (issue 45)
    "versions": "bench_versions",
    "evaluation": "bench_evaluation",
    "sources": "bench_sources",
    "responsiveness": "bench_responsiveness",
    "openai": "bench_openai",
    "documents": "bench_documents",
    "tracing": "bench_tracing",
    "handover": "bench_handover",
    "mcp": "bench_mcp",
    "console": "bench_console",
    "turn": "bench_turn",  # one chat turn, stage by stage (issue 45)
    "kaito": "bench_kaito",  # this engine beside KAITO's service in one run (hack/kaito.sh sets KAITO up)
    "pg_writes": "bench_pg_writes",  # PostgreSQL hybrid search under a concurrent writer
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run, of {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(BENCHES))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    failures = []
    for name in args.names or list(BENCHES):
        module = f"bench.{BENCHES[name]}"
        print(f"\n=== {name} ({module}) ===", flush=True)
        started = time.monotonic()
        cmd = [sys.executable, "-m", module] + (["--quick"] if args.quick else [])
        code = subprocess.call(cmd, cwd=ROOT)  # the root is the import root of bench.* and tests.*
        print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f} s ===", flush=True)
        if code:
            failures.append(name)
    print_summary()
    if failures:
        print(f"\nfailed: {', '.join(failures)}")
    return 1 if failures else 0


def load(name: str) -> dict:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def previous(name: str) -> tuple[dict, str]:
    """The last committed version of results/<name>.json that differs from the file now: the project's
    previous numbers (the working file may already be committed, then it is the one before)."""
    rel = f"bench/results/{name}.json"
    current = (RESULTS / f"{name}.json").read_text() if (RESULTS / f"{name}.json").exists() else None
    try:
        revs = subprocess.run(["git", "log", "--format=%H", "--", rel], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.split()
        for rev in revs:
            text = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True, text=True).stdout
            if text and text != current:
                return json.loads(text), rev[:8]
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    return {}, "-"


def figures(engine: dict, chat: dict) -> dict[str, str]:
    """The issue's table rows from one run's engine.json and chat.json ("-" where a run did not measure)."""
    out = dict.fromkeys(KAITO, "-")
    # The engine's default backend: bench_engine.py measures it first (OpenVINO now, ONNX Runtime before).
    work = next(iter((engine.get("workload") or {}).values()), None)
    if work:
        out["retrieve"] = f"{work['retrieve_p50_ms']:.0f} / {work['retrieve_p99_ms']:.0f} ms"
        out["ingest"] = f"{work['ingest_passages_per_s']:.1f} passages/s"
        out["startup"] = f"{work['startup_s']:.1f} s"
        out["rss"] = f"{work['peak_rss_mib']:.0f} MiB"
    elif "retrieve_small" in engine:
        out["retrieve"] = f"{engine['retrieve_small']['p50_ms']:.0f} / {engine['retrieve_small']['p99_ms']:.0f} ms"
    levels = {lvl["concurrency"]: lvl for lvl in chat.get("levels", [])}
    if 1 in levels:
        out["chat_seq"] = f"{levels[1]['client_p50_ms']:.0f} / {levels[1]['client_p99_ms']:.0f} ms"
    if 16 in levels:
        out["chat_c16"] = f"{levels[16]['rps']:.1f} req/s"
    return out


def print_summary() -> None:
    engine, chat = load("engine"), load("chat")
    if not engine and not chat:
        return
    (old_engine, rev_e), (old_chat, rev_c) = previous("engine"), previous("chat")
    now, before = figures(engine, chat), figures(old_engine, old_chat)
    names = {"retrieve": "/retrieve p50 / p99", "chat_seq": "chat completions, sequential p50 / p99",
             "chat_c16": "chat completions at concurrency 16", "ingest": "ingestion (engine, default backend)",
             "startup": "start-up to /health", "rss": "peak RSS (engine with the ingested passages)"}
    print(f"\n=== summary: this run against the previous results in git (engine.json {rev_e}, chat.json {rev_c}) ===")
    print(f"{'figure':<46} {'now':>18} {'previous':>18} {'KAITO (issue 13)':>18}")
    for key, label in names.items():
        print(f"{label:<46} {now[key]:>18} {before[key]:>18} {KAITO[key]:>18}")
    print_kaito(load("kaito"))
    for lvl in chat.get("levels", []):
        parts = {k: v for k, v in lvl.get("p50_parts_ms", {}).items() if k != "llm"}
        print(f"chat overhead p50 at c={lvl['concurrency']} (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    for key, c in (("stream_ttft_ms", 1), ("stream_ttft_ms_c16", 16)):
        if key in chat:
            print(f"first upstream byte at c={c}: engine overhead {chat[key]['overhead']:.2f} ms over the LLM's own")
    ingest = engine.get("ingest") or {}
    if "torch_fp32_tokens_per_s" in ingest:
        print(f"ingestion tokens/s: engine {ingest['engine_tokens_per_s']:.0f}, raw {ingest['backend']} "
              f"{ingest['raw_tokens_per_s']:.0f} (x{ingest['ratio']:.2f}), torch fp32 model "
              f"{ingest['torch_fp32_tokens_per_s']:.0f} (engine x{ingest['vs_torch']:.2f})")


def print_kaito(side: dict) -> None:
    """bench_kaito.py's figures (both services measured in one run), with KAITO's beside ours."""
    ours, kaito = side.get("ours") or {}, side.get("kaito") or {}
    if not ours:
        return
    print(f"\n=== this engine beside KAITO in one run (kaito.json, {side.get('mode')}, load average "
          f"{side.get('loads')}) ===")
    print(f"{'figure':<34} {'ours':>9} {'KAITO':>9} {'ours/KAITO':>11}")
    for key, value in ours.items():
        other = kaito.get(key)
        ratio = f"{value / other:.2f}x" if other else "-"
        print(f"{key:<34} {value:>9g} {other if other is not None else '-':>9} {ratio:>11}")


if __name__ == "__main__":
    sys.exit(main())
