"""What FAISS's 8-bit vector codes (``vector_compression: sq8``) cost in recall on real embeddings: the second
part of bench/bench_memory.py (its first part measures the memory they save).

- dense: passages of real prose installed on this machine (bench/eval/real_recall.py's collection), embedded
  with the engine's packaged model (MiniLM), 200 of them held out as queries; the engine's ``VectorStore`` built
  over the rest as the engine builds it past ``hnsw_threshold`` (HNSW, the engine's M / efConstruction /
  efSearch), with float vectors and with 8-bit codes; recall@10 of its search against an exact search;
- end to end: the retrieval evaluation's sets (bench/eval/datasets.py, what `make eval` installs) indexed by
  ``IndexRegistry.add_documents`` (chunking and embedding as served); the index's vectors then served exact
  (flat, what an index this small is), by HNSW with float vectors and by HNSW with 8-bit codes (each built
  from the same vectors by ``VectorStore.from_vectors``); the engine's hybrid and dense retrieval scored per
  document (recall@10, nDCG@10 of the relevant documents), as `make eval` scores them.
"""

from __future__ import annotations

import sys
import time

import numpy as np

QUERIES = 200
VARIANTS = {"flat (exact)": None, "HNSW": "none", "HNSW sq8": "sq8"}  # label: compression (None: exact search)


def store_for(vectors: np.ndarray, compression: str, settings):
    """The engine's store over ``vectors`` as it is past ``hnsw_threshold``, with ``compression``."""
    from ragengine.index.store import VectorStore

    return VectorStore.from_vectors(np.ascontiguousarray(vectors), hnsw_threshold=0, hnsw_m=settings.hnsw_m,
                                    ef_search=settings.hnsw_ef_search, ef_construction=settings.hnsw_ef_construction,
                                    compression=compression)


def dense(embedder, n: int) -> dict:
    """Recall@10 of HNSW with float vectors and with 8-bit codes, on ``n`` real passages."""
    from bench.bench_memory import recall_at
    from bench.eval.real_recall import passages
    from ragengine.settings import EngineSettings

    texts = passages(n + QUERIES)
    held = set(np.random.default_rng(3).choice(len(texts), QUERIES, replace=False).tolist())
    query_texts = [t for i, t in enumerate(texts) if i in held]
    texts = [t for i, t in enumerate(texts) if i not in held]
    t0 = time.perf_counter()
    vectors = np.concatenate([np.asarray(embedder.embed_texts_sync(texts[i:i + 2000]), dtype=np.float32)
                              for i in range(0, len(texts), 2000)])
    queries = np.asarray(embedder.embed_queries_sync(query_texts), dtype=np.float32)
    print(f"  {len(texts):,} passages embedded in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    exact = np.argsort(-(vectors @ queries.T), axis=0)[:10].T
    settings = EngineSettings()
    out: dict = {"chunks": len(texts), "queries": QUERIES, "ef_search": settings.hnsw_ef_search, "recall_at_10": {}}
    for label, compression in VARIANTS.items():
        if compression is None:
            continue
        store = store_for(vectors, compression, settings)
        out["recall_at_10"][label] = recall_at([store.search(q, 10)[0] for q in queries], exact)
        print(f"  {label}: dense recall@10 {out['recall_at_10'][label]:.3f}", file=sys.stderr, flush=True)
    return out


async def end_to_end(embedder, max_questions: int | None) -> dict:
    """Per evaluation set, the engine's hybrid and dense scores with each way of serving the same vectors."""
    from bench.eval import datasets as ds
    from bench.eval.run import SetRun, docs_of, subsample

    out: dict = {}
    for name, load in ds.LOADERS.items():
        try:
            data = subsample(load(), max_questions)
        except ds.Missing as exc:
            out[name] = {"missing": str(exc)}
            continue
        async with SetRun(data, embedder, False, None) as run:
            settings = run.settings
            fusion = {"method": settings.fusion, "dense_weight": settings.fusion_dense_weight, "rrf_k": settings.rrf_k,
                      "pool": settings.fusion_candidates}
            vectors = np.array(run.state.store.vectors())
            row: dict = {"chunks": run.state.n_chunks, "questions": len(data.questions), "modes": {}}
            for label, compression in VARIANTS.items():
                if compression is not None:
                    with run.state.rw.write():
                        run.state.store = store_for(vectors, compression, settings)
                        run.state.version += 1
                row["modes"][label] = {"hybrid": run.score(docs_of(await run.engine(hybrid=True, fusion=fusion))),
                                       "dense": run.score(docs_of(await run.engine(hybrid=False)))}
            out[name] = row
            print(f"  {name}: {row}", file=sys.stderr, flush=True)
    return out


async def measure(quick: bool) -> dict:
    from bench.common import load_embedder
    from ragengine.settings import EngineSettings

    embedder = load_embedder()
    try:
        return {"model": EngineSettings().embedding_model, "dense": dense(embedder, 3_000 if quick else 10_000),
                "sets": await end_to_end(embedder, 50 if quick else None)}
    finally:
        embedder.close()


def report(recall: dict) -> None:
    d = recall["dense"]
    print(f"\n=== dense recall@10 on {d['chunks']:,} real passages ({recall['model']}, {d['queries']} held-out "
          f"passages as queries, ef_search {d['ef_search']}) ===")
    print(" | ".join(f"{label} {r:.3f}" for label, r in d["recall_at_10"].items()))
    print("\n| set | chunks | questions | retrieval | " + " | ".join(f"{v} recall@10 / nDCG@10" for v in VARIANTS)
          + " | sq8 minus HNSW, recall@10 |")
    print("|---|---|---|---|" + "---|" * (len(VARIANTS) + 1))
    for name, row in recall["sets"].items():
        if "missing" in row:
            print(f"| {name} | missing: {row['missing']} |")
            continue
        for mode in ("hybrid", "dense"):
            cells = [row["modes"][v][mode] for v in VARIANTS]
            lost = (row["modes"]["HNSW sq8"][mode]["recall@10"] - row["modes"]["HNSW"][mode]["recall@10"]) * 100
            print(f"| {name} | {row['chunks']:,} | {row['questions']} | {mode} | "
                  + " | ".join(f"{c['recall@10']:.3f} / {c['ndcg@10']:.3f}" for c in cells) + f" | {lost:+.1f} points |")
