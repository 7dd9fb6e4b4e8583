"""Embedding models behind one small interface: ``Embedder``.

Local models go through llama-index's ``HuggingFaceEmbedding`` (sentence-transformers); a remote
OpenAI-compatible ``/v1/embeddings`` endpoint goes through ``OpenAICompatibleEmbedding``. Every call is
batched and runs in a worker thread, so the event loop never waits on a forward pass. Document batches
and queries use separate single-thread executors: a query never queues behind a long ingestion batch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from ragengine import metrics
from ragengine.errors import UpstreamError
from ragengine.settings import EngineSettings

log = logging.getLogger(__name__)

PACKAGE_PREFIX = "package:"


def resolve_model_path(name: str) -> str:
    """``package:<module>`` → the model directory shipped in that Python package; anything else as is."""
    if name.startswith(PACKAGE_PREFIX):
        import importlib

        module = importlib.import_module(name[len(PACKAGE_PREFIX):])
        return str(module.get_model_path())
    return name


def pick_device(setting: str) -> str:
    if setting != "auto":
        return setting
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


class OpenAICompatibleEmbedding(BaseEmbedding):
    """llama-index embedding over an OpenAI-compatible ``POST {base}/embeddings`` (one call per batch)."""

    base_url: str
    api_key: str | None = None
    timeout_s: float = 120.0
    _client: httpx.Client = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout_s)

    def _post(self, texts: list[str]) -> list[list[float]]:
        try:
            resp = self._client.post("/embeddings", json={"model": self.model_name, "input": texts})
        except httpx.HTTPError as exc:
            raise UpstreamError(f"Embedding service at {self.base_url} unreachable: {exc}") from exc
        if resp.status_code != 200:
            raise UpstreamError(
                f"Embedding service answered {resp.status_code}: {resp.text[:300]}",
                status_code=resp.status_code if 400 <= resp.status_code < 500 else 502,
            )
        data = sorted(resp.json()["data"], key=lambda item: item.get("index", 0))
        return [item["embedding"] for item in data]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.embed_batch_size):
            out.extend(self._post(texts[start : start + self.embed_batch_size]))
        return out

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._post([text])[0]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._post([query])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)


class Embedder:
    """The engine's embedding model: ``dim``, ``max_tokens``, ``count_tokens`` and async batched embedding."""

    def __init__(self, model: BaseEmbedding, *, dim: int, max_tokens: int, tokenizer: Any | None, kind: str) -> None:
        self.model = model
        self.dim = dim
        self.max_tokens = max_tokens
        self.kind = kind  # "local" or "remote", a metrics label
        self._tokenizer = tokenizer
        self._docs_pool = ThreadPoolExecutor(1, thread_name_prefix="embed-docs")
        self._query_pool = ThreadPoolExecutor(1, thread_name_prefix="embed-query")
        # Queries that arrive while a query forward pass runs wait here and go through the model
        # together in the next pass: under concurrency one batched pass beats N queued ones.
        self._pending_queries: list[tuple[str, asyncio.Future]] = []
        self._query_drain: asyncio.Task | None = None

    # -- tokens ------------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` for the embedding model, without the special tokens it adds."""
        if self._tokenizer is None:
            # Remote model, tokenizer unknown: ~3 characters per token over-counts English, so the
            # chunks we cut stay under the server's limit.
            return max(1, (len(text) + 2) // 3)
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def token_ids(self, text: str) -> list[int]:
        if self._tokenizer is None:
            return list(range(self.count_tokens(text)))
        return self._tokenizer.encode(text, add_special_tokens=False)

    def token_offsets(self, text: str) -> list[tuple[int, int]] | None:
        """Character span of every token (fast tokenizers), or None when unknown."""
        if self._tokenizer is None:
            return None
        try:
            enc = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            return [tuple(o) for o in enc["offset_mapping"]]
        except Exception:
            return None

    @property
    def chunk_token_limit(self) -> int:
        """Largest chunk the model sees whole: max_tokens minus [CLS]/[SEP] for local models."""
        return self.max_tokens - 2 if self._tokenizer is not None else self.max_tokens

    # -- embedding ---------------------------------------------------------------------------------
    def embed_texts_sync(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Sorting by length before batching keeps padding low; sentence-transformers only sorts inside
        # each batch llama-index hands it.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        start = time.perf_counter()
        vectors = self.model.get_text_embedding_batch([texts[i] for i in order])
        metrics.EMBED_SECONDS.labels(kind="documents").observe(time.perf_counter() - start)
        metrics.EMBEDDED_TEXTS.labels(kind="documents").inc(len(texts))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        out[np.asarray(order)] = np.asarray(vectors, dtype=np.float32)
        return _normalise(out)

    def embed_query_sync(self, text: str) -> np.ndarray:
        start = time.perf_counter()
        vector = np.asarray(self.model.get_query_embedding(text), dtype=np.float32)
        metrics.EMBED_SECONDS.labels(kind="query").observe(time.perf_counter() - start)
        metrics.EMBEDDED_TEXTS.labels(kind="query").inc()
        return _normalise(vector.reshape(1, -1))[0]

    async def embed_texts(self, texts: list[str]) -> np.ndarray:
        return await asyncio.get_running_loop().run_in_executor(self._docs_pool, self.embed_texts_sync, list(texts))

    def embed_queries_sync(self, texts: list[str]) -> np.ndarray:
        if len(texts) == 1:
            return self.embed_query_sync(texts[0]).reshape(1, -1)
        start = time.perf_counter()
        batch_query = getattr(self.model, "_embed", None)  # HuggingFaceEmbedding: one pass, query prompt
        if callable(batch_query):
            vectors = batch_query(texts, prompt_name="query")
        else:
            vectors = [self.model.get_query_embedding(t) for t in texts]
        metrics.EMBED_SECONDS.labels(kind="query").observe(time.perf_counter() - start)
        metrics.EMBEDDED_TEXTS.labels(kind="query").inc(len(texts))
        return _normalise(np.asarray(vectors, dtype=np.float32))

    async def embed_query(self, text: str) -> np.ndarray:
        future = asyncio.get_running_loop().create_future()
        self._pending_queries.append((text, future))
        if self._query_drain is None or self._query_drain.done():
            self._query_drain = asyncio.create_task(self._drain_queries())
        return await future

    async def _drain_queries(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending_queries:
            batch, self._pending_queries = self._pending_queries[:64], self._pending_queries[64:]
            texts = [text for text, _ in batch]
            try:
                vectors = await loop.run_in_executor(self._query_pool, self.embed_queries_sync, texts)
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
                if not isinstance(exc, Exception):
                    raise
                continue
            for (_, future), vector in zip(batch, vectors):
                if not future.done():  # the caller may have been cancelled meanwhile
                    future.set_result(vector)

    def close(self) -> None:
        self._docs_pool.shutdown(wait=False, cancel_futures=True)
        self._query_pool.shutdown(wait=False, cancel_futures=True)


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


def build_embedder(settings: EngineSettings) -> Embedder:
    """Load the configured embedding model (local by path/package/name, or remote by URL)."""
    if settings.embedding_url:
        model = OpenAICompatibleEmbedding(
            base_url=settings.embedding_url,
            api_key=settings.embedding_api_key,
            model_name=settings.embedding_model,
            embed_batch_size=settings.embedding_batch_size,
        )
        dim = len(model._get_text_embedding("dimension probe"))
        return Embedder(model, dim=dim, max_tokens=settings.embedding_max_tokens or 512, tokenizer=None, kind="remote")

    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    path = resolve_model_path(settings.embedding_model)
    cache = str(settings.embedding_cache_dir) if settings.embedding_cache_dir else None
    if not Path(path).exists():
        log.info("embedding model %r is not a local path: loading by name (cache %s)", path, cache)
    model = HuggingFaceEmbedding(
        model_name=path,
        device=pick_device(settings.device),
        cache_folder=cache,
        embed_batch_size=settings.embedding_batch_size,
        normalize=True,
    )
    st = model._model
    dim = int(st.get_embedding_dimension() if hasattr(st, "get_embedding_dimension") else st.get_sentence_embedding_dimension())
    max_tokens = int(st.max_seq_length or settings.embedding_max_tokens or 512)
    return Embedder(model, dim=dim, max_tokens=max_tokens, tokenizer=_counting_tokenizer(st.tokenizer), kind="local")


def _counting_tokenizer(tokenizer: Any) -> Any:
    """A copy of the model's tokenizer for counting whole documents: without the model's length limit
    it neither truncates nor warns "sequence length is longer than the specified maximum"."""
    import copy

    try:
        counting = copy.deepcopy(tokenizer)
        counting.model_max_length = 10**9
        return counting
    except Exception:
        return tokenizer
