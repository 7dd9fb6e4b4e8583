"""Retrieval evaluation: MRR@10, Recall@10 and nDCG@10 of dense, BM25 and hybrid search on
registry-installed sets, through the engine's own IndexRegistry (the code behind /retrieve).

    make eval                                   # installs the sets, runs everything, ~5 min on 2 cores
    .venv/bin/python -m bench.eval.run --sets debian-faq --max-questions 50

What it does, per set and per chunking variant (plain chunks / contextual chunks):
  1. indexes the set's documents with ``IndexRegistry.add_documents`` (chunking + embedding as served);
  2. asks every question (top 10 chunks) as dense only, BM25 only (the index's own BM25), dense and
     hybrid with the other ``long_query_windows`` choice (long questions embedded window by window), hybrid with
     the fusion of the engine's settings, hybrid with the two earlier defaults (RRF k=60 with equal
     weights; convex 0.75; both 20 candidates per side), and hybrid / dense with at most one chunk per
     document (``max_chunks_per_document=1``);
  3. on the tuning set, grid-searches the fusion parameters (method, weight, rrf_k, candidates per side)
     on the dense and BM25 candidate lists the engine fuses (``retrieval.hybrid.fuse``); the chosen ones
     are then scored on every set (bench/eval/fusion_explore.py tries further fusion functions on the
     lists that ``EVAL_DUMP`` writes);
  4. counts, per similarity threshold, the questions whose every relevant chunk in the top 10 falls
     below it (what ``similarity_threshold`` would drop from the prompt).
Scores are per document: a document counts at the rank of its best chunk (bench/eval/metrics.py).
Results go to bench/results/eval.json; the table printed is the one in docs/retrieval.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, ROOT, write_result
from bench.eval import datasets as ds
from bench.eval.metrics import summarise

OUT = RESULTS / "eval.json"
DUMP = Path(os.environ["EVAL_DUMP"]) if os.environ.get("EVAL_DUMP") else None  # candidate lists, for exploring fusion
K = 10
POOL = 20  # the candidates per side the engine fused for top_k=10 before fusion_candidates (previous default)
CAND_POOL = 100  # candidates per side collected for the grid, so it can also try larger pools than POOL
THRESHOLDS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.575, 0.6)
TUNING_SET = "zaragoza-construction-faq"
VARIANTS = ["plain", "contextual"]  # chunking variants (--variants)
POOLS = (20, 50, 100)  # candidates per side (settings.fusion_candidates); 20 was the engine's before
GRID = ([{"method": "rrf", "dense_weight": w, "rrf_k": k, "pool": n}
         for w in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9) for k in (10, 30, 60) for n in POOLS]
        + [{"method": "convex", "dense_weight": w, "pool": n}
           for w in (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9) for n in POOLS])
PREVIOUS_DEFAULT = {"method": "rrf", "dense_weight": 0.5, "rrf_k": 60, "pool": 20}
CONVEX_075 = {"method": "convex", "dense_weight": 0.75, "pool": 20}  # the default from the first evaluation
# Row labels for the long_query_windows choice that the engine's settings do not make (keyed by that choice).
OTHER_QUESTIONS = {True: "long questions in windows (long_query_windows=true)",
                   False: "questions cut at the model's window (long_query_windows=false)"}


def subsample(data: ds.Dataset, max_questions: int | None, seed: int = 0) -> ds.Dataset:
    """At most ``max_questions`` questions, drawn with a fixed seed (the corpus stays whole)."""
    if max_questions is None or len(data.questions) <= max_questions:
        return data
    picked = sorted(random.Random(seed).sample(range(len(data.questions)), max_questions))
    data.questions = [data.questions[i] for i in picked]
    data.notes.append(f"questions subsampled to {max_questions} (seed {seed})")
    return data


class SetRun:
    """One set indexed with one chunking variant in a fresh IndexRegistry."""

    def __init__(self, data: ds.Dataset, embedder, contextual: bool, reranker) -> None:
        from ragengine.settings import EngineSettings

        self.data, self.embedder, self.reranker = data, embedder, reranker
        self.tmp = tempfile.TemporaryDirectory()
        self.settings = EngineSettings(data_dir=Path(self.tmp.name), chunk_context=contextual)
        self.qvecs: np.ndarray | None = None

    async def __aenter__(self) -> SetRun:
        from ragengine.index.registry import IndexRegistry

        self.registry = IndexRegistry(self.settings, self.embedder, None)
        await self.registry.start()
        started = time.perf_counter()
        await self.registry.add_documents("eval", self.data.documents)
        self.index_s = time.perf_counter() - started
        self.state = self.registry.get("eval")
        from ragengine.retrieval.long_query import embed_queries_sync

        texts = [q.text for q in self.data.questions]
        # The question vectors /retrieve computes with the engine's long_query_windows, and with the other
        # choice for the OTHER_QUESTIONS rows.
        windows = self.settings.long_query_windows
        self.qvecs = await asyncio.to_thread(embed_queries_sync, self.embedder, texts, windows=windows)
        self.qvecs_other = await asyncio.to_thread(embed_queries_sync, self.embedder, texts, windows=not windows)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.registry.close()
        self.tmp.cleanup()

    # -- one mode over every question ----------------------------------------------------------------
    async def engine(self, *, hybrid: bool, fusion: dict | None = None, per_doc: int | None = None,
                     rerank: bool = False, other_questions: bool = False) -> list[list]:
        """RetrievedNode lists from ``IndexRegistry.retrieve`` with these settings (``other_questions``: the
        question vectors of the other ``long_query_windows`` choice)."""
        self.settings.hybrid = hybrid
        fusion = fusion or {}
        self.settings.fusion = fusion.get("method", "rrf")
        self.settings.fusion_dense_weight = fusion.get("dense_weight", 0.5)
        self.settings.rrf_k = fusion.get("rrf_k", 60)
        self.settings.fusion_candidates = fusion.get("pool", POOL)
        self.registry.reranker = self.reranker if rerank else None
        out = []
        for q, vec in zip(self.data.questions, self.qvecs_other if other_questions else self.qvecs, strict=True):
            out.append(await self.registry.retrieve("eval", q.text, K, query_embedding=vec,
                                                    max_chunks_per_document=per_doc))
        self.registry.reranker = None
        return out

    def bm25(self) -> list[list[str]]:
        """Document ids of the top chunks of the index's own BM25 (what hybrid fuses)."""
        out = []
        with self.state.rw.read():
            for q in self.data.questions:
                slots, _ = self.state.bm25.search(q.text, K, self.state.store.alive)
                out.append([self.state.chunk(int(s))[0].doc_id for s in slots])
        return out

    def candidates(self) -> list[tuple[list, list]]:
        """Per question, the (slot, cosine) and (slot, BM25) lists that the engine fuses, CAND_POOL long
        (exact searches, so their first n entries are what the engine fuses with n candidates per side)."""
        out = []
        with self.state.rw.read():
            for q, vec in zip(self.data.questions, self.qvecs, strict=True):
                d_slots, d_cos = self.state.store.search(vec, CAND_POOL, None)
                s_slots, s_scores = self.state.bm25.search(q.text, CAND_POOL, self.state.store.alive)
                out.append(([(int(s), float(c)) for s, c in zip(d_slots, d_cos, strict=True)],
                            [(int(s), float(v)) for s, v in zip(s_slots, s_scores, strict=True)]))
        return out

    def doc_of(self, slot: int) -> str:
        return self.state.chunk(slot)[0].doc_id

    def score(self, ranked_docs: list[list[str]]) -> dict:
        return summarise([(r, q.relevant) for r, q in zip(ranked_docs, self.data.questions, strict=True)], K)


def docs_of(results: list[list]) -> list[list[str]]:
    return [[n.doc_id for n in nodes] for nodes in results]


def lost_at_thresholds(results: list[list], questions: list[ds.Question]) -> dict:
    """Per threshold, over the top 10: questions left without any relevant chunk (never retrieved, or
    every one below the threshold), of which dropped by the threshold alone; questions without a
    relevant chunk whose whole context the threshold empties (the chat then passes through); and the
    share of irrelevant chunks it removes."""
    out = {}
    for t in THRESHOLDS:
        lost = dropped_by_t = emptied = no_rel = irrelevant = dropped = 0
        for nodes, q in zip(results, questions, strict=True):
            rel = [n.score for n in nodes if n.doc_id in q.relevant]
            other = [n.score for n in nodes if n.doc_id not in q.relevant]
            lost += (not rel) or max(rel) < t
            dropped_by_t += bool(rel) and max(rel) < t
            no_rel += not rel
            emptied += (not rel) and all(s < t for s in other)
            irrelevant += len(other)
            dropped += sum(s < t for s in other)
        out[str(t)] = {"questions_losing_all_relevant": lost, "lost_by_threshold": dropped_by_t, "questions": len(questions),
                       "without_relevant": no_rel, "without_relevant_emptied": emptied,
                       "irrelevant_chunks_dropped": dropped / irrelevant if irrelevant else 0.0}
    return out


def tune(cands: list[tuple[list, list]], doc_of, questions: list[ds.Question]) -> list[dict]:
    """Every GRID point scored on pre-computed candidates with the engine's pure ``fuse``."""
    from ragengine.retrieval.hybrid import FusionParams, fuse

    rows = []
    for point in GRID:
        pool = point.get("pool", POOL)
        params = FusionParams(**{k: v for k, v in point.items() if k != "pool"})
        ranked = [[doc_of(s) for s, _ in fuse(d[:pool], sp[:pool], params=params)[:K]] for d, sp in cands]
        rows.append({"params": point, **summarise([(r, q.relevant) for r, q in zip(ranked, questions, strict=True)], K)})
    return sorted(rows, key=lambda r: (-r[f"mrr@{K}"], -r[f"ndcg@{K}"]))


def bm25_tokenize(text: str) -> list[str]:
    from ragengine.retrieval.bm25 import tokenize

    return tokenize(text)


async def evaluate_set(data: ds.Dataset, embedder, reranker, fusion: dict, log) -> dict:
    """Every mode for both chunking variants; also returns the tuning candidates of the plain variant."""
    out: dict = {"source": data.source, "documents": len(data.documents), "questions": len(data.questions),
                 "notes": data.notes, "variants": {}}
    for variant in VARIANTS:
        contextual = variant == "contextual"
        async with SetRun(data, embedder, contextual, reranker) as run:
            log(f"  {variant}: {run.state.n_chunks} chunks indexed in {run.index_s:.0f} s")
            modes: dict = {}
            modes["dense"] = run.score(docs_of(await run.engine(hybrid=False)))
            modes["bm25"] = run.score(run.bm25())
            other = OTHER_QUESTIONS[not run.settings.long_query_windows]
            modes[f"dense, {other}"] = run.score(docs_of(await run.engine(hybrid=False, other_questions=True)))
            modes[f"hybrid, {other}"] = run.score(docs_of(await run.engine(hybrid=True, fusion=fusion, other_questions=True)))
            modes["hybrid (previous default: rrf k=60 w=0.5)"] = run.score(
                docs_of(await run.engine(hybrid=True, fusion=PREVIOUS_DEFAULT)))
            modes["hybrid (convex w=0.75, 20 per side: the default before fusion_candidates)"] = run.score(
                docs_of(await run.engine(hybrid=True, fusion=CONVEX_075)))
            hybrid = await run.engine(hybrid=True, fusion=fusion)
            modes["hybrid"] = run.score(docs_of(hybrid))
            modes["hybrid, max 1 chunk per document"] = run.score(
                docs_of(await run.engine(hybrid=True, fusion=fusion, per_doc=1)))
            modes["dense, max 1 chunk per document"] = run.score(docs_of(await run.engine(hybrid=False, per_doc=1)))
            if reranker is not None:
                modes["hybrid+rerank"] = run.score(docs_of(await run.engine(hybrid=True, fusion=fusion, rerank=True)))
            cands = run.candidates()
            grid = tune(cands, run.doc_of, data.questions)
            if DUMP:
                DUMP.mkdir(parents=True, exist_ok=True)
                (DUMP / f"{data.name}.{variant}.json").write_text(json.dumps({
                    "relevant": [sorted(q.relevant) for q in data.questions],
                    "query_words": [len(q.text.split()) for q in data.questions],
                    "query_terms": [len(bm25_tokenize(q.text)) for q in data.questions],
                    "cands": [[[[s, run.doc_of(s), c] for s, c in d], [[s, run.doc_of(s), v] for s, v in sp]]
                              for d, sp in cands]}))
            out["variants"][variant] = {
                "chunks": run.state.n_chunks, "index_s": run.index_s, "modes": modes,
                "thresholds_hybrid": lost_at_thresholds(hybrid, data.questions),
                "fusion_grid_top5": grid[:5],
                "fusion_grid": {json.dumps(r["params"], sort_keys=True): r[f"mrr@{K}"] for r in grid},
            }
    return out


def choose_fusion(tuning: dict, variant: str) -> dict:
    """The best grid point (MRR@10, then nDCG@10) of the tuning set."""
    return tuning["variants"][variant]["fusion_grid_top5"][0]["params"]


def print_table(results: dict) -> None:
    head = f"{'set':<28} {'chunks':<11} {'mode':<44} {'MRR@10':>7} {'R@10':>6} {'nDCG@10':>7}"
    print("\n" + head + "\n" + "-" * len(head))
    for name, r in results["sets"].items():
        for variant, v in r["variants"].items():
            for mode, m in v["modes"].items():
                print(f"{name:<28} {variant:<11} {mode:<44} {m['mrr@10']:7.3f} {m['recall@10']:6.3f} {m['ndcg@10']:7.3f}")
    print(f"\nfusion: {json.dumps(results['fusion'])}")
    print(f"\nquestions losing every relevant chunk of the top 10 (hybrid, {VARIANTS[0]} chunks) by similarity threshold:")
    for name, r in results["sets"].items():
        th = r["variants"][VARIANTS[0]]["thresholds_hybrid"]
        cells = ", ".join(f"{t}: {x['questions_losing_all_relevant']}/{x['questions']}"
                          f" (drops {100 * x['irrelevant_chunks_dropped']:.0f}% of irrelevant)" for t, x in th.items())
        print(f"  {name}: {cells}")


def markdown(results: dict) -> str:
    """The tables of docs/retrieval.md, from a results file (``--markdown bench/results/eval.json``)."""
    lines = ["| set | chunks | mode | MRR@10 | Recall@10 | nDCG@10 |", "|---|---|---|---|---|---|"]
    for name, r in results["sets"].items():
        for variant, v in r["variants"].items():
            for mode, m in v["modes"].items():
                lines.append(f"| {name} | {variant} | {mode} | {m['mrr@10']:.3f} | {m['recall@10']:.3f} | {m['ndcg@10']:.3f} |")
    first = next(iter(next(iter(results["sets"].values()))["variants"]))  # plain unless only contextual ran
    lines += ["", f"| set (hybrid, {first} chunks) | " + " | ".join(f"t = {t}" for t in THRESHOLDS) + " |",
              "|---|" + "---|" * len(THRESHOLDS)]
    for name, r in results["sets"].items():
        th = r["variants"][first]["thresholds_hybrid"]
        cells = [f"{x['questions_losing_all_relevant']} ({x['lost_by_threshold']}) / {x['questions']}; "
                 f"{x['without_relevant_emptied']}/{x['without_relevant']}; {100 * x['irrelevant_chunks_dropped']:.0f}%"
                 for x in th.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="*", default=list(ds.LOADERS), help=f"of {', '.join(ds.LOADERS)}")
    ap.add_argument("--max-questions", type=int, default=None, help="subsample each set's questions (seeded)")
    ap.add_argument("--rerank-model", default=os.environ.get("RAGENGINE_RERANK_MODEL"),
                    help="a local cross-encoder path: adds hybrid+rerank")
    ap.add_argument("--variants", nargs="*", default=VARIANTS, choices=VARIANTS, help="chunking variants to index")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--markdown", type=Path, help="print the markdown tables of a results file and exit")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    VARIANTS[:] = args.variants
    started = time.perf_counter()
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {msg}", flush=True)

    defaults = EngineSettings()
    embedder = build_embedder(defaults)
    reranker, rerank_note = None, "n/a: no reranker configured (no cross-encoder ships in a registry package; "
    rerank_note += "set RAGENGINE_RERANK_MODEL to a local model path)"
    if args.rerank_model:
        from ragengine.retrieval.rerank import Reranker

        reranker, rerank_note = Reranker(args.rerank_model), args.rerank_model
    engine_fusion = {"method": defaults.fusion, "dense_weight": defaults.fusion_dense_weight, "rrf_k": defaults.rrf_k,
                     "pool": defaults.fusion_candidates}
    results: dict = {"k": K, "machine": f"{os.cpu_count()} CPUs", "embedding_model": defaults.embedding_model,
                     "fusion": {"engine_default": engine_fusion, "tuned_on": TUNING_SET}, "rerank": rerank_note, "sets": {},
                     "missing": {}}
    loaded = {}
    for name in args.sets:
        try:
            loaded[name] = subsample(ds.LOADERS[name](), args.max_questions)
        except ds.Missing as exc:
            results["missing"][name] = str(exc)
            log(f"{name}: SKIPPED, {exc}")
    for name, data in loaded.items():
        log(f"{name}: {len(data.documents)} documents, {len(data.questions)} questions")
        results["sets"][name] = asyncio.run(evaluate_set(data, embedder, reranker, engine_fusion, log))
    if TUNING_SET in results["sets"]:
        for variant in VARIANTS:
            best = choose_fusion(results["sets"][TUNING_SET], variant)
            results["fusion"][f"tuned_{variant}"] = best
            results["fusion"][f"tuned_{variant}_on_each_set"] = {
                name: r["variants"][variant]["fusion_grid"][json.dumps(best, sort_keys=True)]
                for name, r in results["sets"].items()}
    results["elapsed_s"] = time.perf_counter() - started
    write_result(args.out, results)
    print_table(results)
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out} "
          f"in {results['elapsed_s']:.0f} s")
    embedder.close()
    return 1 if results["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
