"""Score every fusion variant of bench/eval/fusion_variants.py on the candidate lists that ``make eval``
dumps, choose on the tuning set, and show the validation sets (docs/retrieval.md, "Fusion variants").

    EVAL_DUMP=/tmp/evaldump .venv/bin/python -m bench.eval.run --variants plain   # writes the lists
    .venv/bin/python -m bench.eval.fusion_explore /tmp/evaldump [--json bench/results/fusion_variants.json]

The dumps hold, per question, the exact top-100 dense (cosine) and BM25 lists the engine searches, so
a pool of n per side is their first n entries (the engine fuses 20 per side for top 10).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from bench.eval.fusion_variants import variants
from bench.eval.metrics import summarise

K = 10
POOLS = (20, 50, 100)
TUNING_SET = "zaragoza-construction-faq"
SETS = ("debian-faq", "zaragoza-construction-faq", "banking-knowledge")


def load(dump: Path, variant: str = "plain") -> dict[str, dict]:
    out = {}
    for name in SETS:
        path = dump / f"{name}.{variant}.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def score(data: dict, rank_fn, pool: int) -> dict:
    runs = []
    for (dense, sparse), rel, n_terms in zip(data["cands"], data["relevant"], data["query_terms"], strict=True):
        doc = {s: d for s, d, _ in dense} | {s: d for s, d, _ in sparse}
        ranked = rank_fn([(s, c) for s, _, c in dense[:pool]], [(s, v) for s, _, v in sparse[:pool]], n_terms)
        runs.append(([doc[s] for s, _ in ranked[:K]], rel))
    return summarise(runs, K)


def explore(sets: dict[str, dict]) -> dict:
    from ragengine.retrieval.hybrid import FusionParams, fuse

    base = {"dense": lambda d, s, n: list(d), "bm25": lambda d, s, n: list(s)}
    rows = {}
    for set_name, data in sets.items():
        r = rows.setdefault(set_name, {})
        r["dense"] = score(data, base["dense"], 20)
        r["bm25"] = score(data, base["bm25"], 20)
        r["engine default (convex minmax/by_max w=0.75), pool 20"] = score(
            data, lambda d, s, n: fuse(d, s, params=FusionParams()), 20)
        r["previous default (rrf k=60 w=0.5), pool 20"] = score(
            data, lambda d, s, n: fuse(d, s, params=FusionParams(method="rrf", dense_weight=0.5, rrf_k=60)), 20)
        for vname, (_family, _params, fn) in variants().items():
            for pool in POOLS:
                r[f"{vname}, pool {pool}"] = score(data, fn, pool)
    return rows


def per_question_mrr(data: dict, rank_fn, pool: int) -> list[float]:
    from bench.eval.metrics import mrr

    out = []
    for (dense, sparse), rel, n_terms in zip(data["cands"], data["relevant"], data["query_terms"], strict=True):
        doc = {s: d for s, d, _ in dense} | {s: d for s, d, _ in sparse}
        ranked = rank_fn([(s, c) for s, _, c in dense[:pool]], [(s, v) for s, _, v in sparse[:pool]], n_terms)
        out.append(mrr([doc[s] for s, _ in ranked[:K]], rel, K))
    return out


def paired_bootstrap(a: list[float], b: list[float], resamples: int = 2000, seed: int = 0) -> dict:
    """Mean of a - b over questions with a 95% percentile interval from resampling questions, and how
    many questions are better / worse."""
    rng = random.Random(seed)
    diff = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diff)
    means = sorted(sum(diff[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return {"mean": sum(diff) / n, "low": means[int(0.025 * resamples)], "high": means[int(0.975 * resamples)],
            "better": sum(d > 0 for d in diff), "worse": sum(d < 0 for d in diff)}


def engine_vs_dense(sets: dict[str, dict]) -> dict:
    """The engine's default fusion (settings) against dense alone, per set, with bootstrap intervals."""
    from ragengine.retrieval.hybrid import FusionParams, fuse
    from ragengine.settings import EngineSettings

    settings = EngineSettings()
    params = FusionParams.from_settings(settings)
    out = {}
    for name, data in sets.items():
        hybrid = per_question_mrr(data, lambda d, s, n: fuse(d, s, params=params), settings.fusion_candidates)
        dense = per_question_mrr(data, lambda d, s, n: list(d), settings.fusion_candidates)
        out[name] = paired_bootstrap(hybrid, dense)
    return out


def family_table(out: dict) -> str:
    """One markdown row per family and pool: the parameters chosen on the tuning set within it, and
    MRR@10 on every set with them (the table in docs/retrieval.md)."""
    rows, sets = out["rows"], list(out["rows"])
    tuning = rows[TUNING_SET]
    fams: dict[tuple[str, int], list[str]] = {}
    for name, (family, _params, _fn) in variants().items():
        for pool in POOLS:
            fams.setdefault((family, pool), []).append(f"{name}, pool {pool}")
    head = "| family | per side | chosen on the tuning set | " + " | ".join(sets) + " | never loses | mean − dense |"
    lines = [head, "|---|---|---|" + "---|" * len(sets) + "---|---|",
             "| dense | | | " + " | ".join(f"{rows[s]['dense']['mrr@10']:.3f}" for s in sets) + " | | |",
             "| BM25 | | | " + " | ".join(f"{rows[s]['bm25']['mrr@10']:.3f}" for s in sets) + " | | |"]
    for (family, pool), names in fams.items():
        best = max(names, key=lambda n: (round(tuning[n]["mrr@10"], 6), tuning[n]["ndcg@10"]))
        s = out["summary"][best]
        params = variants()[best.rsplit(", pool ", 1)[0]][1]
        lines.append(f"| {family} | {pool} | {params} | " + " | ".join(f"{v:.3f}" for v in s["mrr@10"].values())
                     + f" | {'yes' if s['never_loses'] else 'no'} | {s['mean_over_dense']:+.3f} |")
    return "\n".join(lines)


def report(rows: dict) -> dict:
    names = list(next(iter(rows.values())))
    tuning = rows[TUNING_SET]
    fusions = [n for n in names if n not in ("dense", "bm25")]
    best = max(fusions, key=lambda n: (round(tuning[n]["mrr@10"], 6), tuning[n]["ndcg@10"]))
    summary = {}
    for n in fusions:
        gains = {s: rows[s][n]["mrr@10"] - max(rows[s]["dense"]["mrr@10"], rows[s]["bm25"]["mrr@10"]) for s in rows}
        summary[n] = {"mrr@10": {s: rows[s][n]["mrr@10"] for s in rows}, "over_best_single": gains,
                      "mean_over_dense": sum(rows[s][n]["mrr@10"] - rows[s]["dense"]["mrr@10"] for s in rows) / len(rows),
                      "never_loses": all(g >= 0 for g in gains.values())}
    return {"tuning_set": TUNING_SET, "chosen_on_tuning_set": best, "rows": rows, "summary": summary}


def _rounded(obj):
    if isinstance(obj, float):
        return round(obj, 4)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", type=Path)
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--top", type=int, default=25, help="rows to print, best on the tuning set first")
    ap.add_argument("--markdown", action="store_true", help="print the per-family table of docs/retrieval.md")
    args = ap.parse_args()
    sets = load(args.dump)
    out = report(explore(sets))
    tuning = out["rows"][TUNING_SET]
    order = sorted(out["summary"], key=lambda n: -tuning[n]["mrr@10"])
    print(f"{'variant':<72} " + " ".join(f"{s[:12]:>12}" for s in out["rows"]) + "  mean-dense  never-loses")
    for name in ["dense", "bm25"]:
        print(f"{name:<72} " + " ".join(f"{out['rows'][s][name]['mrr@10']:12.3f}" for s in out["rows"]))
    for n in order[: args.top]:
        s = out["summary"][n]
        print(f"{n:<72} " + " ".join(f"{v:12.3f}" for v in s["mrr@10"].values())
              + f"  {s['mean_over_dense']:+10.3f}  {s['never_loses']}")
    print(f"\nchosen on {TUNING_SET}: {out['chosen_on_tuning_set']}")
    never = [n for n in order if out["summary"][n]["never_loses"]]
    print(f"variants that never lose ({len(never)} of {len(order)}), best on the tuning set first:")
    for n in never[:15]:
        s = out["summary"][n]
        print(f"  {n:<70} " + " ".join(f"{v:.3f}" for v in s["mrr@10"].values()) + f"  mean-dense {s['mean_over_dense']:+.3f}")
    out["engine_default_vs_dense"] = boot = engine_vs_dense(sets)
    print("\nengine default - dense, MRR@10 per question (paired bootstrap, 95%):")
    for name, b in boot.items():
        print(f"  {name:<28} {b['mean']:+.4f} [{b['low']:+.4f}, {b['high']:+.4f}]  better {b['better']}, worse {b['worse']}")
    if args.markdown:
        print("\n" + family_table(out))
    if args.json:  # one line per set's rows, metrics to 4 decimals: the file stays small enough to keep
        args.json.write_text(json.dumps(_rounded(out), separators=(",", ":")).replace('},"', '},\n"'))
    return 0


if __name__ == "__main__":
    sys.exit(main())
