"""``Embedder``: the engine's embedding model over one backend (OpenVINO or ONNX Runtime running the
model's ONNX export, sentence-transformers, or a remote OpenAI-compatible endpoint; see the package
docstring).

Every call is batched and runs in a worker thread, so the event loop never waits on a forward pass.
Document batches and queries use separate single-thread executors: a query never queues behind a long
ingestion batch (the export runtimes also give queries their own one-thread compiled model). Backends
are imported when chosen, so a torch-free install never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from ragengine import metrics
from ragengine.embedding.locate import PACKAGE_PREFIX, check_offline_model, resolve_model_path
from ragengine.embedding.tokens import TextTokenizer
from ragengine.settings import EngineSettings

log = logging.getLogger(__name__)

def pick_device(setting: str) -> str:
    """"auto": the GPU when torch sees one, else the CPU, saying so (the GPU image on a node without a
    GPU limit, or with a driver older than its CUDA, must degrade, not fail to start)."""
    if setting != "auto":
        return setting
    try:
        import torch

        if torch.cuda.is_available():
            log.info("embeddings run on the GPU: %s (CUDA %s)", torch.cuda.get_device_name(0), torch.version.cuda)
            return "cuda"
        if torch.version.cuda is None:  # a CPU build: nothing was lost
            log.info("embeddings run on the CPU (this torch has no CUDA)")
            return "cpu"
        why = f"no GPU visible to CUDA {torch.version.cuda} (no GPU limit on the pod, or a driver too old)"
    except Exception as exc:  # torch missing or broken: the CPU backends need none
        why = f"torch unavailable ({type(exc).__name__})"
    log.warning("RAGENGINE_DEVICE=auto: embeddings run on the CPU: %s", why)
    return "cpu"


class Backend(Protocol):
    """What a backend gives the ``Embedder``: vectors in the caller's order (normalised or not)."""

    name: str
    dim: int
    max_tokens: int

    @property
    def tokenizer(self) -> TextTokenizer | None: ...  # read-only: backends narrow it (or have none)

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...
    def embed_queries(self, texts: list[str]) -> np.ndarray: ...
    def close(self) -> None: ...


class Embedder:
    """The engine's embedding model: ``dim``, ``max_tokens``, ``count_tokens`` and async batched embedding."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.dim = backend.dim
        self.max_tokens = backend.max_tokens
        self.kind = "remote" if backend.name == "remote" else "local"  # a metrics label
        self.backend_note: str | None = None  # why a slow backend runs, when it does (embedding/fastpath.py)
        self._tokenizer = backend.tokenizer
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
        return len(self._tokenizer.ids(text))

    def token_ids(self, text: str) -> list[int]:
        if self._tokenizer is None:
            return list(range(self.count_tokens(text)))
        return self._tokenizer.ids(text)

    def token_offsets(self, text: str) -> list[tuple[int, int]] | None:
        """Character span of every token (fast tokenizers), or None when unknown."""
        if self._tokenizer is None:
            return None
        return self._tokenizer.offsets(text)

    @property
    def chunk_token_limit(self) -> int:
        """Largest chunk the model sees whole: max_tokens minus [CLS]/[SEP] for local models."""
        return self.max_tokens - 2 if self._tokenizer is not None else self.max_tokens

    # -- embedding ---------------------------------------------------------------------------------
    def embed_texts_sync(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        start = time.perf_counter()
        vectors = self.backend.embed_documents(list(texts))  # backends bucket by length themselves
        metrics.EMBED_SECONDS.labels(kind="documents").observe(time.perf_counter() - start)
        metrics.EMBEDDED_TEXTS.labels(kind="documents").inc(len(texts))
        return _normalise(np.asarray(vectors, dtype=np.float32))

    def embed_queries_sync(self, texts: list[str]) -> np.ndarray:
        """One pass for all ``texts``, with the model's query prompt where it has one."""
        start = time.perf_counter()
        vectors = self.backend.embed_queries(list(texts))
        metrics.EMBED_SECONDS.labels(kind="query").observe(time.perf_counter() - start)
        metrics.EMBEDDED_TEXTS.labels(kind="query").inc(len(texts))
        return _normalise(np.asarray(vectors, dtype=np.float32))

    def embed_query_sync(self, text: str) -> np.ndarray:
        return self.embed_queries_sync([text])[0]

    async def embed_texts(self, texts: list[str]) -> np.ndarray:
        return await asyncio.get_running_loop().run_in_executor(self._docs_pool, self.embed_texts_sync, list(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self.embed_query_batch([text]))[0]

    async def embed_query_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Query vectors for ``texts``, in one forward pass when nothing is in flight; with the queries of
        other requests in the next pass when one is."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in texts]
        self._pending_queries.extend(zip(texts, futures, strict=True))
        if self._query_drain is None or self._query_drain.done():
            # Nothing in flight: these queries go to the thread now, before this coroutine yields. Handed to the
            # drain task instead, they waited a turn of the event loop behind whatever else was ready there
            # (0.39 ms median from the call to the thread in bench_turn).
            self._query_drain = asyncio.create_task(self._drain_queries(self._next_query_pass(loop)))
        return list(await asyncio.gather(*futures))

    def _next_query_pass(self, loop: asyncio.AbstractEventLoop) -> tuple[list, asyncio.Future]:
        """The pending queries (at most 64), taken off the queue and sent to the query thread as one pass."""
        batch, self._pending_queries = self._pending_queries[:64], self._pending_queries[64:]
        try:
            job = loop.run_in_executor(self._query_pool, self.embed_queries_sync, [text for text, _ in batch])
        except RuntimeError as exc:  # the pool is shut down (closing): the batch's callers get the error
            job = loop.create_future()
            job.set_exception(exc)
        return batch, job

    async def _drain_queries(self, first: tuple[list, asyncio.Future]) -> None:
        """Settles ``first``'s queries, then passes over the queries that came meanwhile until none are left."""
        loop = asyncio.get_running_loop()
        running: tuple[list, asyncio.Future] | None = first
        while running is not None:
            batch, job = running
            try:
                vectors = await job
            except BaseException as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
                if not isinstance(exc, Exception):
                    raise
            else:
                for (_, future), vector in zip(batch, vectors, strict=True):
                    if not future.done():  # the caller may have been cancelled meanwhile
                        future.set_result(vector)
            running = self._next_query_pass(loop) if self._pending_queries else None

    def finish(self) -> None:
        """What ``build_embedder(defer=True)`` left (blocking; a no-op for the backends that left nothing)."""
        finish = getattr(self.backend, "finish", None)
        if finish is not None:
            finish()

    def close(self) -> None:
        self._docs_pool.shutdown(wait=False, cancel_futures=True)
        self._query_pool.shutdown(wait=False, cancel_futures=True)
        self.backend.close()


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


EXPORT_RUNTIMES = ("openvino", "onnx")  # run the ONNX export; "auto" takes the first that imports
RUNTIME_MODULES = {"openvino": "openvino", "onnx": "onnxruntime"}


def _imports(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def choose_backend(settings: EngineSettings) -> tuple[str, Any]:
    """("remote" | "wordllama" | "openvino" | "onnx" | "torch", the export's (model dir, ONNX file) for the export runtimes).

    ``auto``: on a CPU, when the model has an ONNX export installed, OpenVINO if it imports, else ONNX
    Runtime; on CUDA or without an export (or either runtime), torch. Naming a runtime whose export or
    package is missing is an error that says what to install.
    """
    if settings.embedding_url:
        return "remote", None
    from ragengine.embedding.wordllama_backend import PREFIX as WORDLLAMA

    if settings.embedding_model.startswith(WORDLLAMA):  # static embeddings: no runtime to choose
        return "wordllama", None
    from ragengine.embedding.export import find_onnx

    if settings.embedding_backend == "torch":
        return "torch", None
    found = find_onnx(settings.embedding_model)
    if settings.embedding_backend in EXPORT_RUNTIMES:
        if found is None:
            raise RuntimeError(
                f"embedding_backend={settings.embedding_backend} but {settings.embedding_model!r} has no ONNX export: run "
                f"'python -m ragengine.embedding.export --model {settings.embedding_model}' (needs the onnx-export extra)"
            )
        module = RUNTIME_MODULES[settings.embedding_backend]
        if not _imports(module):
            raise RuntimeError(f"embedding_backend={settings.embedding_backend} needs the {module!r} package "
                               "(pip install 'ragengine[engine]')")
        return settings.embedding_backend, found
    if found is None or settings.device == "cuda":
        return "torch", None
    for runtime in EXPORT_RUNTIMES:
        if _imports(RUNTIME_MODULES[runtime]):
            return runtime, found
    return "torch", None


def build_embedder(settings: EngineSettings, *, defer: bool = False) -> Embedder:
    """Load the configured embedding model (local by path/package/name, or remote by URL). ``defer``: leave what
    can wait until the engine serves to ``Embedder.finish()`` (OpenVINO's lone-query model)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    kind, found = choose_backend(settings)
    note = None
    model = settings.embedding_model
    if (kind == "torch" and settings.embedding_backend == "auto" and settings.device != "cuda"
            and not model.startswith(PACKAGE_PREFIX) and os.path.isdir(model)):
        from ragengine.embedding.fastpath import ensure_export  # a model folder by path: export it once

        found, note = ensure_export(settings, model)
        if found is not None:
            kind = next((r for r in EXPORT_RUNTIMES if _imports(RUNTIME_MODULES[r])), "torch")
    backend: Backend
    if kind == "remote":
        from ragengine.embedding.remote import RemoteBackend

        backend = RemoteBackend(settings.embedding_url or "", settings.embedding_model, settings.embedding_api_key,
                                settings.embedding_batch_size, settings.embedding_max_tokens or 512)
    elif kind == "wordllama":
        from ragengine.embedding.wordllama_backend import WordLlamaBackend

        backend = WordLlamaBackend(settings.embedding_model, settings.embedding_batch_size)
    elif kind == "openvino":
        from ragengine.embedding.fastpath import model_cache
        from ragengine.embedding.openvino_backend import OpenVinoBackend

        backend = OpenVinoBackend(found[0], found[1], settings.embedding_batch_size, settings.embedding_threads or None,
                                  settings.embedding_precision, model_cache(settings), defer=defer)
    elif kind == "onnx":
        from ragengine.embedding.onnx_backend import OnnxBackend

        backend = OnnxBackend(found[0], found[1], settings.embedding_batch_size, settings.embedding_threads or None)
    else:
        cache = str(settings.embedding_cache_dir) if settings.embedding_cache_dir else None
        check_offline_model(settings.embedding_model, cache)
        from ragengine.embedding.torch_backend import TorchBackend

        backend = TorchBackend(resolve_model_path(settings.embedding_model), pick_device(settings.device), cache,
                               settings.embedding_batch_size, settings.embedding_max_tokens)
    log.info("embedding backend: %s (dim %d, %d tokens, %s threads for documents, precision %s)", backend.name,
             backend.dim, backend.max_tokens, getattr(backend, "threads", "-"), getattr(backend, "precision", "f32"))
    embedder = Embedder(backend)
    embedder.backend_note = note
    return embedder
