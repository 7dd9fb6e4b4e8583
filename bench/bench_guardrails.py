"""Guardrails: precision/recall per scanner on the labelled set, and the latency the policy adds.

1. Evaluation: every output of bench/guardrails/outputs.jsonl (generator: bench/guardrails/generate.py)
   through one scanner at a time (redact), and through KAITO's default template plus ban_substrings and
   invisible_text; a scanner "fires" when it acts on the output. Precision/recall per scanner against the
   labels, and leaks: labelled values still present in the output.
2. Latency: a 2,000-token answer (about 8,000 characters) as 4-character deltas, as an LLM streams them.
   - scan CPU per delta and per token (the policy's own time, what it adds to each delta);
   - hold-back: how many deltas after it arrived each character is released (0 = in the same delta),
     for plain prose and for prose with a secret every ~500 characters;
   - a whole JSON answer checked at once.
Prints tables and writes bench/results/guardrails.json. Usage: python -m bench.bench_guardrails
"""

from __future__ import annotations

import json
import platform
import statistics
import time

from bench.common import RESULTS, ROOT, write_result
from ragengine.guardrails.policy import parse_policy
from ragengine.guardrails.scan import OutputGuard

DATA = ROOT / "bench" / "guardrails" / "outputs.jsonl"
KAITO_DEFAULT = (ROOT / "tests" / "guardrails" / "data" / "kaito-default-policy.yaml").read_text()
KAITO_REGEX = KAITO_DEFAULT.split("  - type: secrets")[0].split("scanners:\n", 1)[1]
SINGLE = {
    "secrets": "  - type: secrets\n",
    "sensitive": "  - type: sensitive\n",
    "regex": KAITO_REGEX,
    "ban_substrings": "  - type: ban_substrings\n    substrings: [For Internal Use Only, Do Not Distribute]\n",
    "invisible_text": "  - type: invisible_text\n",
}
FULL = KAITO_DEFAULT + SINGLE["ban_substrings"] + SINGLE["invisible_text"]
ALL_EIGHT = FULL + ("  - type: json\n  - type: reading_time\n    max_time: 60\n    truncate: true\n"
                    "  - type: token_limit\n    limit: 100000\n")


def guard(scanners: str) -> OutputGuard:
    return OutputGuard(parse_policy("scanners:\n" + scanners if not scanners.startswith("blockMessage") else scanners))


def evaluate() -> dict:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    out: dict = {"outputs": len(rows), "positives": sum(r["kind"] == "positive" for r in rows),
                 "hard_negatives": sum(r["kind"] == "hard_negative" for r in rows), "scanners": {}}
    for name, scanners in SINGLE.items():
        g = guard(scanners)
        tp = fp = fn = leaks = 0
        misses, false_alarms = [], []
        for r in rows:
            v = g.check(r["text"])
            fired, wanted = bool(v.hits), name in r["labels"]
            tp += fired and wanted
            fp += fired and not wanted
            fn += wanted and not fired
            if wanted and any(val in v.text for val in r["values"]):
                leaks += 1
                misses.append(r["note"])
            if fired and not wanted:
                false_alarms.append(r["note"])
        out["scanners"][name] = {
            "tp": tp, "fp": fp, "fn": fn, "precision": round(tp / (tp + fp), 3) if tp + fp else None,
            "recall": round(tp / (tp + fn), 3) if tp + fn else None, "leaks": leaks,
            "missed": sorted(set(misses)), "false_alarms": sorted(set(false_alarms))}
    g = guard(FULL)
    tp = fp = fn = leaks = 0
    for r in rows:
        v = g.check(r["text"])
        fired, wanted = bool(v.hits), bool(r["labels"])
        tp, fp, fn = tp + (fired and wanted), fp + (fired and not wanted), fn + (wanted and not fired)
        leaks += any(val in v.text for val in r["values"])
    out["combined"] = {"tp": tp, "fp": fp, "fn": fn, "precision": round(tp / (tp + fp), 3),
                       "recall": round(tp / (tp + fn), 3), "leaks": leaks}
    return out


PROSE = ("The engine retrieves the chunks that match the question, fits them into the context window and asks "
         "the model for an answer; the answer streams back token by token while the sources follow. ")


def answer(with_secrets: bool, chars: int = 8000) -> str:
    text, i = "", 0
    while len(text) < chars:
        text += PROSE
        if with_secrets and i % 3 == 2:
            text += f"The key is AKIAIOSFODNN{i % 10}EXAMPLE and mail ops{i}@example.com today. "
        i += 1
    return text[:chars]


def latency(policy: str, with_secrets: bool, delta_chars: int = 4, rounds: int = 5) -> dict:
    g = guard(policy)
    text = answer(with_secrets)
    deltas = [text[i:i + delta_chars] for i in range(0, len(text), delta_chars)]
    per_delta, holds = [], []
    for _ in range(rounds):
        stream, received, released = g.stream(), 0, 0
        arrival: list[int] = []
        for k, d in enumerate(deltas):
            arrival += [k] * len(d)
            t0 = time.perf_counter()
            stream.feed(d)
            per_delta.append(time.perf_counter() - t0)
            received += len(d)
            now = stream.emitted
            holds += [k - arrival[j] for j in range(released, now)]
            released = now
        stream.close()
        holds += [len(deltas) - arrival[j] for j in range(released, len(text))]
    tokens = len(text) / 4
    return {"deltas": len(deltas), "scan_us_per_delta_p50": round(statistics.median(per_delta) * 1e6, 1),
            "scan_us_per_delta_p99": round(sorted(per_delta)[int(len(per_delta) * 0.99)] * 1e6, 1),
            "scan_us_per_token": round(sum(per_delta) / rounds / tokens * 1e6, 1),
            "scan_ms_per_answer": round(sum(per_delta) / rounds * 1000, 1),
            "hold_deltas_mean": round(statistics.mean(holds), 2),
            "hold_deltas_p99": sorted(holds)[int(len(holds) * 0.99)], "hold_deltas_max": max(holds)}


def main() -> None:
    results: dict = {"machine": platform.processor() or platform.machine(), "python": platform.python_version()}
    results["evaluation"] = ev = evaluate()
    print(f"evaluation set: {ev['outputs']} outputs ({ev['positives']} positives, {ev['hard_negatives']} hard negatives)")
    print(f"{'scanner':16} {'TP':>4} {'FP':>4} {'FN':>4} {'precision':>9} {'recall':>7} {'leaks':>5}")
    for name, m in [*ev["scanners"].items(), ("combined", ev["combined"])]:
        print(f"{name:16} {m['tp']:4} {m['fp']:4} {m['fn']:4} {m['precision']!s:>9} {m['recall']!s:>7} {m['leaks']:5}")
        for k in ("missed", "false_alarms"):
            if m.get(k):
                print(f"    {k}: {', '.join(m[k])}")
    results["latency"] = lat = {}
    for label, policy in (("kaito_default", KAITO_DEFAULT), ("default+ban+invisible", FULL),
                          ("regex_only", KAITO_REGEX), ("all_eight_whole_answer", ALL_EIGHT)):
        for secrets in (False, True):
            lat[f"{label}/{'secrets' if secrets else 'plain'}"] = latency(policy, secrets)
    print(f"\n{'policy/answer (2,000 tokens, 4-char deltas)':44} {'us/delta p50':>12} {'p99':>7} {'us/token':>8} "
          f"{'ms/answer':>9} {'hold mean':>9} {'p99':>4} {'max':>5}")
    for name, m in lat.items():
        print(f"{name:44} {m['scan_us_per_delta_p50']:12} {m['scan_us_per_delta_p99']:7} {m['scan_us_per_token']:8} "
              f"{m['scan_ms_per_answer']:9} {m['hold_deltas_mean']:9} {m['hold_deltas_p99']:4} {m['hold_deltas_max']:5}")
    g = guard(KAITO_DEFAULT)
    text = answer(True)
    t0 = time.perf_counter()
    for _ in range(20):
        g.check(text)
    results["json_check_ms_2000_tokens_kaito_default"] = round((time.perf_counter() - t0) / 20 * 1000, 2)
    print(f"\nwhole answer (JSON path), KAITO default, 2,000 tokens: {results['json_check_ms_2000_tokens_kaito_default']} ms")
    out = RESULTS / "guardrails.json"
    write_result(out, results)
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
