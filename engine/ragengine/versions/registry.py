"""The index API clients use, over the store's own registry (FAISS, or PostgreSQL / Milvus): every index
name resolves to its live version, and a version can be rebuilt in the background and swapped in.

- Reads (``retrieve``, ``list_documents``, exports) go to the live version, with its own embedding model.
- Writes go to the live version first (its answer is the client's: 409s and all), then are mirrored to
  every other version in ``Book.write_targets`` (a version being built, or a retired one being brought up
  to date) as what the live version now holds of those documents (``sync_documents`` with the written
  version as ``source``, so an older copy never lands over a newer one). The book is read again after the
  write, so a write that crosses a swap still reaches the new live version.
- Jobs (``versions.builder``) run in the background of whichever replica holds their lease.
- The engine's target model: new indexes are made with it; when it changes (``set_target``, the embedding
  file) every index is re-indexed to it (``Book.follows_target``).

The stores' registries know nothing of versions: they hold physical indexes ("<name>", "<name>/v2", ...)
(``index.api.PhysicalIndexes``) and embed each with the model ``index.models.IndexModels`` names, which this
class records there from the books.

This module is the facade, split by responsibility: the books this process knows and the operations on them
are ``state.VersionState``; the write path ``writes``; the start-up clean-up, the background loop and the target
model ``upkeep.Upkeep``; exports, imports and loads ``transfer``; the jobs ``builder``; the pure parts ``book`` and
``archive``. Reads, the versions API (re-index, activate, drop) and the status stay here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ragengine.embedding.pool import EmbedderPool, ModelRef, ModelUnavailable, target_digest
from ragengine.errors import Conflict, EngineError, NotFound, Unprocessable
from ragengine.index.api import IndexAPI, PhysicalIndexes
from ragengine.index.chunk_tokens import ChunkTokenCounter
from ragengine.index.documents import DocSearch, NewDoc
from ragengine.index.models import IndexModels
from ragengine.index.types import ChunkingConfig, RetrievedNode
from ragengine.retrieval import filters as flt
from ragengine.settings import EngineSettings
from ragengine.versions import book as bk
from ragengine.versions import transfer, writes
from ragengine.versions.book import Book
from ragengine.versions.books import Books
from ragengine.versions.builder import run_job
from ragengine.versions.state import VersionState, must_exist
from ragengine.versions.upkeep import Upkeep

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder

log = logging.getLogger(__name__)
# The version (number, embedding model) the last read of this task was served from: /retrieve's headers.
SERVED: contextvars.ContextVar[tuple[int, str] | None] = contextvars.ContextVar("served_version", default=None)


class VersionedRegistry(IndexAPI):
    def __init__(self, settings: EngineSettings, inner: PhysicalIndexes, models: IndexModels, books: Books, *,
                 shared: bool, generation: int | None = None) -> None:
        """``models``: the same object ``inner`` embeds with (this class records each version's model there);
        ``generation``: the embedding file's generation of the target model (None: the settings' model)."""
        self.settings = settings
        self.inner = inner
        self.models = models
        self.embedders: EmbedderPool = models.pool
        self.books = books
        self.shared = shared  # an external store: other replicas may run jobs and write books
        self.kind = inner.kind
        self.reranker = inner.reranker
        self.state = VersionState(settings, inner, models, books, shared=shared, generation=generation)
        self.upkeep = Upkeep(self.state, lambda name: self.default_gate(name),
                             lambda name, job_id: run_job(self, name, job_id))
        self._loop: asyncio.Task | None = None
        # Set by the evaluation service (docs/evaluation.md): scores a gated re-index's version before its swap,
        # and the gate every re-index that names none gets (the engine's evaluation file; None: none).
        self.gate_check: Callable[..., Any] | None = None
        self.default_gate: Callable[[str], dict | None] = lambda _name: None

    # -- what the rest of the engine reads ---------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        embedder: Embedder = self.embedders.default
        return embedder

    @property
    def chunk_tokens(self) -> ChunkTokenCounter | None:  # the inner registry's
        return self.inner.chunk_tokens

    @chunk_tokens.setter
    def chunk_tokens(self, value: ChunkTokenCounter | None) -> None:
        self.inner.chunk_tokens = value

    @property
    def generation(self) -> int | None:
        """The embedding file's generation of the target model (None: the settings' model)."""
        return self.state.generation

    async def book(self, name: str) -> Book:
        """The index's book (an external store is asked on a miss: another replica may have made it)."""
        return await self.state.book(name)

    # -- lookup ------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return self.state.names()

    async def list_names(self) -> list[str]:
        if self.shared:
            await self.state.reload()
        return self.state.names()

    def exists(self, name: str) -> bool:
        return self.state.exists(name)

    async def health(self) -> str | None:
        return await self.inner.health()

    def status(self) -> dict:
        inner = self.inner.status()
        counts = inner.get("indexes", {})
        indexes = {}
        target = self.embedders.target.key
        for name, book in sorted(self.state.cache.items()):
            live = book.live_version
            entry = dict(counts.get(live.physical) or {"documents": 0, "chunks": 0, "kind": self.kind})
            entry.update(version=book.live, current=live.model == target)
            job = book.running_job
            if job is not None:
                entry["reindex"] = {"kind": job.kind, "version": job.version, "documents_done": job.done,
                                    "documents_total": job.total}
            last = book.job
            if last is not None and last.state == bk.JOB_REJECTED:  # the operator's Reindexing condition says why
                verdict = book.version(last.version).evaluation if last.version in _numbers(book) else None
                entry["rejected"] = {"version": last.version, "message": last.message, "at": last.finished_at,
                                     **{k: (verdict or {}).get(k) for k in ("metric", "candidate", "baseline",
                                                                            "minimum", "max_regression")}}
            indexes[name] = entry
        out = {**inner, "indexes": indexes,
               "embedding": {"target": target_digest(self.embedders.target), "generation": self.generation,
                             "models_loaded": len(self.embedders.keys())}}
        corrupt = {bk.logical_name(k): v for k, v in inner.get("corrupt", {}).items()}
        out["corrupt"] = corrupt
        return out

    # -- start / stop ------------------------------------------------------------------------------
    async def start(self, read_only: bool = False) -> None:
        """``read_only`` (FAISS only): a stand-by's registry, the books as they are, no adoption, clean-up,
        target or jobs (each writes), for reads only until the process takes the folder over."""
        if read_only:
            await self.inner.start(read_only=True)
            await self.state.reload()
            return
        await self.inner.start()
        try:
            await self.upkeep.prepare()
        except EngineError as exc:  # an external store down at start: the loop tries again
            log.error("index versions not loaded yet: %s", exc.message)
        self._loop = asyncio.create_task(self.upkeep.run(), name="index-versions")

    async def close(self) -> None:
        tasks = [t for t in (self._loop, *self.state.jobs.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.inner.close()

    async def set_target(self, ref: ModelRef, generation: int | None) -> None:
        """A new target model (the embedding file changed): load it, then re-index every index to it."""
        await self.upkeep.set_target(ref, generation)

    async def replicas_without(self, model: str) -> list[str]:
        """External stores: the replicas seen lately that have not loaded ``model`` yet."""
        return await self.upkeep.replicas_without(model)

    # -- writes (``writes``: to the live version, then mirrored) ---------------------------------------
    async def add_documents(self, index_name: str, documents: list[dict], chunking: dict | None = None) -> list[dict]:
        return await writes.add_documents(self.state, index_name, documents, chunking)

    async def add_precomputed(self, index_name: str, texts: list[str], vectors: np.ndarray,
                              metadatas: list[dict] | None = None) -> None:
        """One-chunk documents with given unit vectors, which must come from the engine's model (benchmarks)."""
        await writes.add_precomputed(self.state, index_name, texts, vectors, metadatas)

    async def update_documents(self, index_name: str, documents: list[dict]) -> dict:
        return await writes.update_documents(self.state, index_name, documents)

    async def update_metadata(self, index_name: str, documents: list[dict]) -> dict:
        return await writes.update_metadata(self.state, index_name, documents)

    async def delete_documents(self, index_name: str, doc_ids: list[str]) -> dict:
        return await writes.delete_documents(self.state, index_name, doc_ids)

    async def delete_index(self, name: str) -> None:
        await writes.delete_index(self.state, name)

    # -- /persist, /load (FAISS), export and import -------------------------------------------------
    async def persist(self, name: str, path: str | None) -> str:
        book = await self.book(name)
        return await self.inner.persist(book.live_version.physical, path)

    async def load(self, name: str, path: str | None, overwrite: bool) -> str:
        return await transfer.load(self.state, name, path, overwrite)

    async def export(self, name: str) -> AsyncIterator[bytes]:
        return await transfer.export(self.state, name)

    async def import_(self, name: str, body: AsyncIterator[bytes]) -> dict:
        return await transfer.import_(self.state, name, body)

    # -- reads -------------------------------------------------------------------------------------
    async def _live(self, name: str) -> bk.Version:
        book = await self.book(name)
        live = book.live_version
        if live.model is None:
            raise Conflict(self.state.unknown_model(book))
        SERVED.set((live.version, live.model))
        return live

    async def chunking(self, name: str) -> ChunkingConfig | None:
        """How the index's live version splits documents; None when there is no such index."""
        book = await self.state.fresh(name) if self.shared else self.state.cache.get(name)
        if book is None:
            return None
        return await self.inner.chunking(book.live_version.physical)

    async def list_documents(self, index_name: str, *, limit: int = 10, offset: int = 0,
                             max_text_length: int | None = 1000, metadata_filter: dict | str | None = None,
                             acl: flt.Acl | None = None, search: DocSearch | None = None) -> dict:
        live = await self._live(index_name)
        return await self.inner.list_documents(live.physical, limit=limit, offset=offset, max_text_length=max_text_length,
                                               metadata_filter=metadata_filter, acl=acl, search=search)

    async def retrieve(self, index_name: str, query: str, top_k: int, *, filters: dict | None = None,
                       metadata_filter: dict | None = None, query_embedding: np.ndarray | None = None,
                       max_chunks_per_document: int | None = None, long_query_windows: bool | None = None,
                       acl: flt.Acl | None = None, version: int | None = None) -> list[RetrievedNode]:
        """The live version's answer; ``version``: that version's, whatever is live (evaluations)."""
        kwargs: dict[str, Any] = dict(filters=filters, metadata_filter=metadata_filter, query_embedding=query_embedding,
                                      max_chunks_per_document=max_chunks_per_document,
                                      long_query_windows=long_query_windows, acl=acl)
        if version is not None:
            target = await self.servable(index_name, version)
            SERVED.set((target.version, target.model))  # type: ignore[arg-type]  # servable: a known model
            return await self.inner.retrieve(target.physical, query, top_k, **kwargs)
        live = await self._live(index_name)
        try:
            return await self.inner.retrieve(live.physical, query, top_k, **kwargs)
        except NotFound:
            if not self.shared:
                raise
            # Another replica swapped and dropped the version this one still had as live: ask again.
            self.state.remember(index_name, await self.books.get(index_name))
            live = await self._live(index_name)
            return await self.inner.retrieve(live.physical, query, top_k, **kwargs)

    async def get_document(self, index_name: str, doc_id: str, *, acl: flt.Acl | None = None) -> NewDoc | None:
        """One whole document of the live version (None when there is none, or ``acl`` hides it: the
        caller's document ACL, ``access.decide.document_acl``); a missing index is NotFound, as on reads."""
        live = await self._live(index_name)
        doc = (await self.inner.fetch(live.physical, [doc_id])).get(doc_id)
        return doc if doc is not None and (acl is None or flt.matches(acl, doc.metadata)) else None

    async def servable(self, name: str, version: int) -> bk.Version:
        """Version ``version`` of the index, when it can be searched (it has data and a known model)."""
        book = await self.state.fresh(name) if self.shared else None
        target = (book or await self.book(name)).version(version)
        if target.model is None:
            raise Conflict(f"Version {version} of index '{name}' was made with an unknown model: it cannot be searched.")
        if not self.inner.exists(target.physical) and not self.shared:
            raise Conflict(f"Version {version} of index '{name}' holds no data yet.")
        await self.embedders.get(target.model)
        return target

    async def present(self, name: str, version: int, doc_ids: list[str]) -> dict[str, dict]:
        """The metadata of those of ``doc_ids`` that version ``version`` holds (evaluations count the others)."""
        target = await self.servable(name, version)
        found = await self.inner.fetch(target.physical, doc_ids) if doc_ids else {}
        return {d: dict(doc.metadata or {}) for d, doc in found.items()}

    # -- versions and jobs (the API) -----------------------------------------------------------------
    async def versions(self, name: str) -> dict:
        book = await self.state.fresh(name) if self.shared else None
        book = book or await self.book(name)
        out = bk.summary(book, target_model=self.embedders.target.key)
        counts = self.inner.status().get("indexes", {})
        for entry in out["versions"]:
            found = counts.get(book.version(entry["version"]).physical) or {}
            entry["documents"], entry["chunks"] = found.get("documents", 0), found.get("chunks", 0)
        return out

    async def reindex(self, name: str, chunking: dict | None, model: str | None,
                      only_if_changed: bool = False, gate: dict | None = None) -> tuple[dict, bool]:
        """Start building a new version; -> (the book's summary, whether a job started). ``only_if_changed``:
        not when the live version (or the running job's target) already has this model and chunking.
        ``gate``: score it before the swap (default: the engine's configured gate for this index, if any)."""
        gate = gate or self.default_gate(name)
        await self.book(name)
        key = ModelRef.parse(model).key if model else self.embedders.target.key
        try:  # a model that cannot load is refused now, not in the background
            embedder = await self.embedders.get(key)
        except ModelUnavailable as exc:
            if not model:
                raise  # the engine's own target model: the engine's fault, a 503
            # the caller named a model this engine cannot load (an unknown name, offline, a dead URL): a 422
            raise Unprocessable(f"{exc.message}; name a model this engine can load (docs/versions.md)",
                                param="embedding_model") from exc
        config = await self.state.config_for(name, embedder, chunking)
        started: list[bool] = []

        def change(cur: Book | None) -> Book:
            book = must_exist(cur, name)
            job = book.running_job
            have = [book.live_version] + ([book.version(job.version)] if job is not None else [])
            if only_if_changed and any((v.model, v.chunking) == (key, config) for v in have):
                return book
            started.append(True)
            return bk.start_reindex(book, key, embedder.dim, config, uuid.uuid4().hex[:12], time.time(), gate)

        new = await self.state.update(name, change)
        assert new is not None
        if started:
            log.info("index %r: re-index to version %d (model %r) started", name, new.running_job.version, key)  # type: ignore[union-attr]
            self.state.wake.set()
        return bk.summary(new, target_model=self.embedders.target.key), bool(started)

    async def activate(self, name: str, version: int) -> dict:
        new = await self.state.update(name, lambda cur: bk.start_activate(must_exist(cur, name), version,
                                                                          uuid.uuid4().hex[:12], time.time()))
        assert new is not None
        self.state.wake.set()
        return bk.summary(new, target_model=self.embedders.target.key)

    async def drop_version(self, name: str, version: int) -> dict:
        gone: list[bk.Version] = []

        def change(cur: Book | None) -> Book:
            book, dropped = bk.drop_version(must_exist(cur, name), version)
            gone.append(dropped)
            return book

        new = await self.state.update(name, change)
        await self.state.drop(gone)
        assert new is not None
        return bk.summary(new, target_model=self.embedders.target.key)

    async def wait_idle(self, name: str, timeout_s: float) -> Book:
        """The book once no job runs on the index (tests and the CLI; the API answers 202 at once)."""
        deadline = time.monotonic() + timeout_s
        while True:
            book = await self.state.fresh(name) or await self.book(name)
            if book.running_job is None:
                return book
            if time.monotonic() > deadline:
                raise TimeoutError(f"index {name!r}: {book.running_job}")
            await asyncio.sleep(0.1)


def _numbers(book: Book) -> set[int]:
    return {v.version for v in book.versions}
