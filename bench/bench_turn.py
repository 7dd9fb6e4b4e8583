"""One chat turn, stage by stage: where the engine's own time goes (issue 45).

Starts the fake vLLM (tests/llm_server: zero latency, a /tokenize endpoint) and ``ragengine serve`` through
``bench/engine/turn_server.py`` (the same CLI and app, with timers around each stage: bench/engine/turn_profile.py),
indexes Python documentation passages (bench/engine/pydocs.py), then asks the Python FAQ's questions one at a
time, each once, as RAG chat completions (a new question every turn: its prompt is counted afresh). Prints the
median of each stage's own time per turn beside the previous results and writes bench/results/turn.json.

    .venv/bin/python -m bench.bench_turn [--quick] [--docs 1000] [--source DIR] [--set KEY=VALUE ...]

``--source DIR`` profiles another checkout's engine (its ``engine/`` folder; e.g. ``git archive <rev> engine``
unpacked into DIR) with this checkout's timers: a before/after on one machine. Stages the other engine lacks
show 0. The machine's load average is printed with the figures: on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import RESULTS, write_result
from bench.engine import turn_report
from bench.engine.pydocs import python_docs
from tests.llm_server import write_tokenizer
from tests.support.engine_process import REPO, engine_process

OUT = RESULTS / "turn.json"


def run(docs: int, warmup: int, settings: dict[str, str], source: Path, cprofile: Path | None = None) -> dict:
    passages, questions = python_docs(docs)
    with tempfile.TemporaryDirectory(prefix="bench-turn-") as work:
        out = Path(work) / "profile.json"
        if settings.get("llm_tokenizer") == "fake":  # the served model's own tokenizer, as a local file
            settings = {**settings, "llm_tokenizer": str(write_tokenizer(Path(work) / "tokenizer.json"))}
        with engine_process(Path(work), settings=settings, source=source, module="bench.engine.turn_server",
                            env={"RAGENGINE_TURN_PROFILE_OUT": str(out),
                                 **({"RAGENGINE_TURN_CPROFILE": str(cprofile)} if cprofile else {})}) as engine, \
                httpx.Client(base_url=engine.base_url, timeout=120) as client:
            for start in range(0, len(passages), 100):
                client.post("/index", json={"index_name": "pydocs", "documents": [
                    {"text": t, "metadata": {"n": start + i}} for i, t in enumerate(passages[start:start + 100])]}
                            ).raise_for_status()

            outcomes: dict[str, int] = {}

            def ask(question: str) -> float:
                t = time.perf_counter()
                r = client.post("/v1/chat/completions", json={"index_name": "pydocs",
                                                              "messages": [{"role": "user", "content": question}]})
                elapsed = time.perf_counter() - t
                r.raise_for_status()
                outcome = r.headers.get("x-rag-outcome", "-")
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                return elapsed

            # Warm-up on other words (first-use code paths, the tokenizer probe, the model's buffers).
            for i in range(warmup):
                ask(f"warm-up question {i}: how are {passages[i].split()[0]} and {passages[-i - 1].split()[0]} used?")
            load = os.getloadavg()[0]
            outcomes.clear()
            client_s = [ask(q) for q in questions]
            load = max(load, os.getloadavg()[0])
        data = json.loads(out.read_text())
    records = data["records"][warmup:]
    for record, seconds in zip(records, client_s, strict=True):
        record["client"] = seconds
    turns = len(records)
    settings = {k: ("<the fake LLM's tokenizer.json>" if k == "llm_tokenizer" and v else v) for k, v in settings.items()}
    return {"passages": len(passages), "questions": turns, "load_average": round(load, 2),
            "settings": settings, "outcomes": outcomes, "missing_stages": data["missing"],
            "tokenize_calls_per_turn": round(data["calls"].get("tokens.remote", 0) / (turns + warmup), 2),
            "client_p50_ms": round(statistics.median(client_s) * 1000, 2),
            "rows": turn_report.rows(records),
            "stages_p50_ms": {stage: round(statistics.median([r.get(stage, 0.0) for r in records]) * 1000, 3)
                              for stage in sorted({s for r in records for s in r})},
            "calls_per_turn": {stage: round(n / (turns + warmup), 2) for stage, n in sorted(data["calls"].items())}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 passages")
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--source", type=Path, default=REPO, help="the checkout whose engine/ runs (default: this one)")
    ap.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="engine settings; llm_tokenizer defaults to the fake LLM's own tokenizer.json (a local "
                         "tokenizer of the served model), --set llm_tokenizer= for none (the server's /tokenize)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cprofile", type=Path, help="also write cProfile stats of the event loop's thread here "
                    "(slows the turn: for finding hot functions, not for the figures)")
    args = ap.parse_args()
    settings = {k: v for k, v in {"llm_tokenizer": "fake", **dict(s.split("=", 1) for s in args.extra)}.items() if v}
    result = run(200 if args.quick else args.docs, args.warmup, settings, args.source.resolve(), args.cprofile)
    result["mode"] = "quick" if args.quick else "default"
    result["source"] = "this checkout" if args.source.resolve() == REPO else str(args.source)
    before = json.loads(args.out.read_text()) if args.out.exists() else {}
    write_result(args.out, result)
    turn_report.print_table(result["rows"], before.get("rows"), (
        f"one chat turn, stage by stage: {result['questions']} FAQ questions over {result['passages']} Python-docs "
        f"passages, one client, fake LLM with zero latency; load average {result['load_average']} on "
        f"{os.cpu_count()} CPUs"))
    print(f"/tokenize calls per turn: {result['tokenize_calls_per_turn']} (previous: "
          f"{before.get('tokenize_calls_per_turn', '-')}); stages this engine lacks: {result['missing_stages'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
