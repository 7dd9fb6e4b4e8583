"""Retrieval quality on the Debian FAQ (apt's debian-faq): dense, BM25, hybrid, hybrid + rerank."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path


def bench_quality(emb, rerank_model: str | None) -> dict:
    from bench.eval.datasets import Missing, debian_faq
    from ragengine.index.registry import IndexRegistry
    from ragengine.settings import EngineSettings

    try:  # the same parse of the FAQ as ``make eval`` (bench/eval/datasets.py)
        faq = debian_faq()
    except Missing as exc:
        return {"error": str(exc)}
    items = [(q.qid, q.text) for q in faq.questions]
    reranker, rerank_note = None, None
    if rerank_model:
        from ragengine.retrieval.rerank import Reranker

        try:
            reranker = Reranker(rerank_model)
        except Exception as exc:
            rerank_note = f"could not load {rerank_model}: {exc}"
    else:
        rerank_note = ("n/a: no cross-encoder ships in a PyPI package and the hub is unreachable offline "
                       "(pass --rerank-model PATH to measure one)")

    async def run() -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            settings = EngineSettings(data_dir=Path(tmp))
            registry = IndexRegistry(settings, emb, None)
            await registry.start()
            await registry.add_documents("faq", [{"doc_id": d["doc_id"], "text": d["text"]} for d in faq.documents])
            state = registry.get("faq")
            out = {}

            async def evaluate(mode: str) -> dict:
                rr, hit = 0.0, 0
                for sid, question in items:
                    if mode == "bm25":
                        slots, _ = state.bm25.search(question, 50, state.store.alive)
                        docs = [state.chunk(int(s))[0].doc_id for s in slots]
                    else:
                        settings.hybrid = mode != "dense"
                        registry.reranker = reranker if mode == "hybrid+rerank" else None
                        nodes = await registry.retrieve("faq", question, 30)
                        docs = [n.doc_id for n in nodes]
                    ranked = list(dict.fromkeys(docs))[:10]
                    if sid in ranked:
                        hit += 1
                        rr += 1.0 / (ranked.index(sid) + 1)
                return {"mrr_at_10": rr / len(items), "recall_at_10": hit / len(items)}

            for mode in ("dense", "bm25", "hybrid"):
                out[mode] = await evaluate(mode)
            out["hybrid+rerank"] = await evaluate("hybrid+rerank") if reranker else {"n/a": rerank_note}
            out["chunks"] = state.n_chunks
            await registry.close()
            return out

    result = asyncio.run(run())
    return {"questions": len(items), **result}
