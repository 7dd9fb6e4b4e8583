"""Same-model techniques tried for the "+0.05 MRR@10 over dense" target (docs/retrieval.md, "Same-model
techniques tried for +0.05"): pseudo-relevance feedback, document-context scoring, BM25 with a title
field or RM3 expansion, and a few other re-scorings that use only all-MiniLM-L6-v2's vectors.

    nice -n 10 .venv/bin/python -m bench.eval.same_model_cache /tmp/quality3      # index + embed once (~4 min)
    .venv/bin/python -m bench.eval.same_model_explore /tmp/quality3 --json bench/results/same_model_explore.json

Everything is scored on the cached vectors with exact (flat) dense search, the engine's BM25Index and
the engine's ``fuse`` (convex, dense weight 0.85, 50 candidates per side), so the "dense" and "hybrid"
rows reproduce ``make eval``'s plain-chunk numbers. Each family's parameters are chosen on the tuning
set (zaragoza-construction-faq) by MRR@10 (then nDCG@10) and only validated on the two others.

Every variant has two rankings: its dense side alone ("dense'"), and that dense side fused with BM25
exactly as the engine fuses today ("hybrid'"); BM25 families change the BM25 side instead.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.eval.metrics import mrr, summarise
from bench.eval.same_model_data import (
    POOL,
    RESCORE,
    SETS,
    TUNING_SET,
    DenseFn,
    K,
    SetData,
    SparseFn,
    load,
    plain_dense,
    plain_sparse,
    unit,
)
from bench.eval.same_model_variants import families


def hybrid(dense: list[tuple[int, float]], sparse: list[tuple[int, float]]) -> list[int]:
    from ragengine.retrieval.hybrid import FusionParams, fuse

    return [k for k, _ in fuse(dense[:POOL], sparse[:POOL], params=FusionParams())]


def run_variant(s: SetData, dense_fn: DenseFn = plain_dense, sparse_fn: SparseFn = plain_sparse,
                with_dense: bool = True) -> dict[str, dict]:
    """Scores of the variant's dense' (when it changes the dense side) and hybrid' rankings."""
    d_runs, h_runs, h_mrr = [], [], []
    for qi in range(len(s.queries)):
        dense = dense_fn(s, qi)
        h = s.docs(hybrid(dense, sparse_fn(s, qi))[:K])
        h_runs.append((h, s.relevant[qi]))
        h_mrr.append(mrr(h, s.relevant[qi], K))
        if with_dense:
            d_runs.append((s.docs([c for c, _ in dense[:K]]), s.relevant[qi]))
    out = {"hybrid'": summarise(h_runs, K)}
    out["hybrid'"]["per_question_mrr"] = h_mrr
    if with_dense:
        out["dense'"] = summarise(d_runs, K)
    return out


# -- the exploration ----------------------------------------------------------------------------------
def paired_bootstrap(a: list[float], b: list[float], resamples: int = 2000, seed: int = 0) -> list[float]:
    """Mean of a - b with a 95% percentile interval, resampling questions."""
    diff = np.asarray(a) - np.asarray(b)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (resamples, len(diff)))].mean(axis=1)
    return [float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def explore(sets: dict[str, SetData], log, only: str | None = None) -> dict:
    rows: dict[str, dict] = {}
    base = {}
    for name, s in sets.items():
        r = run_variant(s)
        base[name] = {"dense": r["dense'"], "bm25": summarise([(s.docs([c for c, _ in s.bm25_lists[qi][:K]]), s.relevant[qi])
                                                               for qi in range(len(s.queries))], K),
                      "hybrid": r["hybrid'"]}
    for family, params, fn in families():
        if only and only not in family:
            continue
        started = time.perf_counter()
        key = f"{family} [{params}]"
        rows[key] = {"family": family, "params": params, "sets": {}}
        for name, s in sets.items():
            if "dense" in fn:
                rows[key]["sets"][name] = run_variant(s, dense_fn=fn["dense"])
            else:
                rows[key]["sets"][name] = run_variant(s, sparse_fn=fn["sparse"], with_dense=False)
        log(f"{key}: {time.perf_counter() - started:.1f} s")
    return {"baselines": base, "variants": rows}


def choose(result: dict, sets: list[str], ref: dict) -> list[dict]:
    """Per family and ranking (dense' / hybrid'), the tuning set's best parameters and their scores
    everywhere: "never below" against this pass's own dense and BM25, the mean gain against today's
    dense (``ref``). ``blind``: no grid point changes the tuning set's scores (ties keep the first)."""
    base = result["baselines"]
    best: dict[tuple[str, str], tuple] = {}
    for key, row in result["variants"].items():
        for ranking, m in row["sets"][TUNING_SET].items():
            cand = (m["mrr@10"], m["ndcg@10"])
            slot = (row["family"], ranking)
            if slot not in best or cand > best[slot][0]:
                best[slot] = (cand, key)
    table = []
    dense_mean = np.mean([ref[n]["dense"]["mrr@10"] for n in sets])
    for (family, ranking), (_, key) in best.items():
        row = result["variants"][key]
        mrrs = {n: row["sets"][n][ranking]["mrr@10"] for n in sets}
        recalls = {n: row["sets"][n][ranking]["recall@10"] for n in sets}
        never_loses = all(mrrs[n] >= max(base[n]["dense"]["mrr@10"], base[n]["bm25"]["mrr@10"]) for n in sets)
        hindsight = max((r for r in result["variants"].values() if r["family"] == family),
                        key=lambda r: np.mean([r["sets"][n][ranking]["mrr@10"] for n in sets]))
        hindsight_gain = float(np.mean([hindsight["sets"][n][ranking]["mrr@10"] for n in sets]) - dense_mean)
        base_tuning = base[TUNING_SET]["dense" if ranking == "dense'" else "hybrid"]
        blind = all(abs(r["sets"][TUNING_SET][ranking]["mrr@10"] - base_tuning["mrr@10"]) < 1e-12
                    and abs(r["sets"][TUNING_SET][ranking]["ndcg@10"] - base_tuning["ndcg@10"]) < 1e-12
                    for r in result["variants"].values() if r["family"] == family)
        table.append({"family": family, "ranking": ranking, "params": row["params"], "key": key, "blind": blind,
                      "mrr@10": mrrs,
                      "hindsight_params": hindsight["params"], "hindsight_mean_minus_dense": hindsight_gain,
                      "recall@10": recalls, "mean_minus_dense": float(np.mean(list(mrrs.values())) - dense_mean),
                      "never_below_max_dense_bm25": never_loses})
    return sorted(table, key=lambda r: -r["mean_minus_dense"])


def markdown(result: dict, table: list[dict], sets: list[str], ref: dict, rankings: tuple[str, ...]) -> str:
    """The table of docs/retrieval.md: this pass's base rows, then each family's tuning-set choice."""
    base = result["baselines"]
    head = ("| family | ranking | chosen on the tuning set | " + " | ".join(f"{n} MRR / R@10" for n in sets)
            + " | never below max(dense, BM25) | mean MRR − dense | best in hindsight (chosen on all sets) |")
    lines = [head, "|---|---|---|" + "---|" * len(sets) + "---|---|---|"]
    for mode in ("dense", "bm25", "hybrid"):
        cells = " | ".join(f"{base[n][mode]['mrr@10']:.3f} / {base[n][mode]['recall@10']:.3f}" for n in sets)
        gain = np.mean([base[n][mode]["mrr@10"] - ref[n]["dense"]["mrr@10"] for n in sets])
        lines.append(f"| {mode} (base) | | | {cells} | | {gain:+.3f} | |")
    for r in table:
        if r["ranking"] not in rankings:
            continue
        cells = " | ".join(f"{r['mrr@10'][n]:.3f} / {r['recall@10'][n]:.3f}" for n in sets)
        chosen = (r["params"] or "—") + (" (tie: no effect on the tuning set)" if r["blind"] else "")
        lines.append(f"| {r['family']} | {r['ranking']} | {chosen} | {cells} | "
                     f"{'yes' if r['never_below_max_dense_bm25'] else 'no'} | {r['mean_minus_dense']:+.3f} | "
                     f"{r['hindsight_mean_minus_dense']:+.3f} ({r['hindsight_params'] or '—'}) |")
    return "\n".join(lines)


def with_long_questions(s: SetData) -> SetData:
    """The same set with every question embedded as the token-weighted mean of its 254-token windows
    (``long questions in pieces: win254, wmean``); questions that fit one window are unchanged."""
    qp = dict(np.load(s.cache / f"{s.name}.queries.npz"))
    vecs = np.zeros_like(s.query_vecs)
    np.add.at(vecs, qp["win254_query"], qp["win254_vecs"] * qp["win254_tokens"][:, None].astype(np.float32))
    out = dataclasses.replace(s, query_vecs=unit(vecs))
    for name in ("_extras", "_sent_of"):
        if hasattr(s, name):
            setattr(out, name, getattr(s, name))
    return out


def bootstraps(result: dict, table: list[dict], ref: dict, names: list[str]) -> dict:
    """Paired bootstrap of the tuning-set choice with the best mean (hybrid') against today's hybrid."""
    best = next((r for r in table if r["ranking"] == "hybrid'"), None)
    if best is None:
        return {}
    row = result["variants"][best["key"]]
    return {"variant": best["key"], **{n: paired_bootstrap(row["sets"][n]["hybrid'"]["per_question_mrr"],
                                                   ref[n]["hybrid"]["per_question_mrr"]) for n in names}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cache", type=Path, help="the folder bench/eval/same_model_cache.py wrote")
    ap.add_argument("--json", type=Path, help="write every variant's scores here")
    ap.add_argument("--only", help="only the families whose name contains this")
    ap.add_argument("--no-stack", action="store_true", help="skip the second pass over long questions in pieces")
    ap.add_argument("--hybrid-only", action="store_true", help="print only the hybrid' rows (the tables in docs)")
    args = ap.parse_args()
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:5.0f} s] {msg}", file=sys.stderr, flush=True)

    sets = {n: load(args.cache, n) for n in SETS if (args.cache / f"{n}.npz").exists()}
    names = list(sets)
    passes = {"questions as today (cut at 256 tokens)": sets}
    if not args.no_stack:
        passes["on top of long questions in pieces (win254, wmean)"] = {n: with_long_questions(s) for n, s in sets.items()}
    out: dict = {"k": K, "pool_per_side": POOL, "rescore_candidates": RESCORE, "tuning_set": TUNING_SET, "passes": {}}
    rankings = ("hybrid'",) if args.hybrid_only else ("dense'", "hybrid'")
    ref = None
    for label, pass_sets in passes.items():
        log(label)
        only = args.only
        result = explore(pass_sets, log, only)
        if ref is None:
            ref = result["baselines"]
        else:  # the long-question family itself is the base of this pass
            result["variants"] = {k: v for k, v in result["variants"].items() if not k.startswith("long questions")}
        table = choose(result, names, ref)
        result["best_vs_today_hybrid_bootstrap"] = bootstraps(result, table, ref, names) if TUNING_SET in sets else {}
        print(f"\n### {label}\n\n" + markdown(result, table, names, ref, rankings))
        result["chosen"] = table
        out["passes"][label] = result
    if args.json:
        for result in out["passes"].values():  # per-question lists were for the bootstrap; keep the file small
            for row in result["variants"].values():
                for per_set in row["sets"].values():
                    per_set["hybrid'"].pop("per_question_mrr", None)
        for result in out["passes"].values():
            for b in result["baselines"].values():
                b["hybrid"].pop("per_question_mrr", None)
        args.json.write_text(json.dumps(out, indent=1, default=float))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
