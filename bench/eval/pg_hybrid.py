"""PostgreSQL's hybrid search on the evaluation sets, with each of its two keyword legs.

    .venv/bin/python -m bench.eval.pg_hybrid          # after `make eval` installed the sets

The store answers unfiltered keyword searches from each replica's in-memory BM25 index
(``keyword_mirror``, ``store_keyword_index=memory``, the default) and filtered ones with PostgreSQL's
full-text search (``keyword_leg``: ``ts_rank_cd`` over a bounded candidate set; ``database`` makes it
answer every search). This indexes each set once, as served (``add_documents``: the engine's chunking and
embedding), into a real PostgreSQL, and asks every question through the engine's registry (the code
behind ``/retrieve``) with each leg: dense only, keyword only (the leg alone) and hybrid (the engine's
fusion). MRR@10, Recall@10 and nDCG@10 per document (bench/eval/metrics.py). Writes
bench/results/pg_hybrid.json and prints a table.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS
from bench.eval import datasets as ds
from bench.eval.metrics import summarise
from bench.eval.report import write_and_print
from tests.support.postgres import postgres_server

K = 10
OUT = RESULTS / "pg_hybrid.json"
LEGS = ("memory", "database")


async def evaluate(data: ds.Dataset, url: str, schema: str, tmp: Path, embedder) -> dict:
    from ragengine.retrieval.long_query import embed_queries_sync
    from ragengine.settings import EngineSettings
    from ragengine.versions import build_registry

    registries = {leg: build_registry(EngineSettings(
        data_dir=tmp / leg, vector_store="postgres", vector_store_url=url, vector_store_prefix=schema,
        store_keyword_index=leg), embedder) for leg in LEGS}
    for registry in registries.values():
        await registry.start()
    first = registries[LEGS[0]]
    await first.add_documents("eval", data.documents)
    texts = [q.text for q in data.questions]
    vectors = await asyncio.to_thread(embed_queries_sync, embedder, texts, windows=first.settings.long_query_windows)
    adapter = first.inner.adapter
    physical = (await first.book("eval")).live_version.physical
    rows: dict[str, dict] = {}
    for leg, registry in registries.items():
        store = registry.inner.adapter
        keyword = [[h.doc_id for h in await asyncio.to_thread(store.keyword, physical, q.text, v, K, None)]
                   for q, v in zip(data.questions, vectors, strict=True)]
        rows[f"keyword ({leg})"] = summarise([(r, q.relevant) for r, q in zip(keyword, data.questions, strict=True)], K)
        for hybrid in ((False, True) if leg == LEGS[0] else (True,)):
            registry.settings.hybrid = hybrid
            ranked = [[n.doc_id for n in await registry.retrieve("eval", q.text, K, query_embedding=v)]
                      for q, v in zip(data.questions, vectors, strict=True)]
            label = f"hybrid ({leg})" if hybrid else "dense"
            rows[label] = summarise([(r, q.relevant) for r, q in zip(ranked, data.questions, strict=True)], K)
    counts = adapter.counts().get(physical, (0, 0))
    for registry in registries.values():
        await registry.close()
    return {"documents": counts[0], "chunks": counts[1], "questions": len(data.questions), "modes": rows}


def main() -> int:
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    results: dict = {"k": K, "sets": {}, "missing": {}}
    started = time.monotonic()
    embedder = build_embedder(EngineSettings())
    with postgres_server() as sa_url, tempfile.TemporaryDirectory() as tmp_name:
        url = sa_url.replace("postgresql+psycopg://", "postgresql://")
        for i, (set_name, loader) in enumerate(ds.LOADERS.items()):
            try:
                data = loader()
            except ds.Missing as exc:
                results["missing"][set_name] = str(exc)
                continue
            print(f"{set_name}: indexing {len(data.documents)} documents", file=sys.stderr, flush=True)
            results["sets"][set_name] = asyncio.run(evaluate(data, url, f"eval{i}", Path(tmp_name) / str(i), embedder))
    embedder.close()
    write_and_print(OUT, results, started, "| set (chunks) | mode | MRR@10 | Recall@10 | nDCG@10 |\n|---|---|---|---|---|",
                    lambda m: f"{m['mrr@10']:.3f} | {m['recall@10']:.3f} | {m['ndcg@10']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
