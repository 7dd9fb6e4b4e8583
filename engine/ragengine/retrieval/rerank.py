"""Optional cross-encoder rerank (sentence-transformers ``CrossEncoder``), loaded when
``settings.rerank_model`` names a local path or a model name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ragengine import metrics
from ragengine.embedding import pick_device, resolve_model_path
from ragengine.observability import tracing


class Reranker:
    def __init__(self, model_name: str, device: str = "auto", cache_dir: str | None = None) -> None:
        from sentence_transformers import CrossEncoder

        self.name = model_name
        self.model = CrossEncoder(resolve_model_path(model_name), device=pick_device(device), cache_folder=cache_dir)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rerank")

    def scores_sync(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        start = time.perf_counter()
        raw = self.model.predict([(query, t) for t in texts], batch_size=32, show_progress_bar=False)
        metrics.RERANK_SECONDS.observe(time.perf_counter() - start)
        return [float(x) for x in (raw.reshape(len(texts), -1)[:, -1] if getattr(raw, "ndim", 1) > 1 else raw)]

    async def order(self, query: str, texts: Sequence[str]) -> list[int]:
        """Indices of ``texts`` from most to least relevant to ``query``."""
        with tracing.stage("rerank", model=self.name, candidates=len(texts)):
            scores = await asyncio.get_running_loop().run_in_executor(self._pool, self.scores_sync, query, list(texts))
        return sorted(range(len(texts)), key=lambda i: -scores[i])

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
