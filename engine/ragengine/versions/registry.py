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

Longer than 400 lines for now: one class implements the whole ``IndexAPI`` over the books (every method reads or
updates them under the same lock and cache); the pure parts are already ``book.py`` and ``archive.py``, the jobs
``builder.py``. Issue 49 item 4 names its split (export / import and the background loop first) as left to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ragengine import metrics
from ragengine.embedding.pool import EmbedderPool, ModelRef, ModelUnavailable, target_digest
from ragengine.errors import Conflict, EngineError, NotFound, Unprocessable
from ragengine.index import disk
from ragengine.index.api import IndexAPI, PhysicalIndexes
from ragengine.index.chunk_tokens import ChunkTokenCounter
from ragengine.index.chunking import new_index_config
from ragengine.index.documents import DocSearch, NewDoc, clean_documents, content_id
from ragengine.index.models import IndexModels
from ragengine.index.types import ChunkingConfig, RetrievedNode
from ragengine.retrieval import filters as flt
from ragengine.settings import EngineSettings
from ragengine.versions import archive
from ragengine.versions import book as bk
from ragengine.versions.book import Book
from ragengine.versions.books import Books

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder

log = logging.getLogger(__name__)
# The version (number, embedding model) the last read of this task was served from: /retrieve's headers.
SERVED: contextvars.ContextVar[tuple[int, str] | None] = contextvars.ContextVar("served_version", default=None)
LOOP_S = 1.0  # how often jobs, targets and (external stores) the books are looked at
HEARTBEAT_S = 5.0  # external stores: how often a replica says which models it has loaded
LEASE_S = 30.0  # external stores: a job's lease; renewed with its progress
IMPORT_STALE_S = 24 * 3600.0  # a hidden import index older than this is a crashed import's: dropped


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
        self.replica = uuid.uuid4().hex[:12]
        # One process per FAISS data directory: no one to wait for, a restarted process resumes at once.
        self.lease_s = float(settings.reindex_lease_s) if shared else 0.0
        self.generation = generation
        self._books: dict[str, Book] = {}
        self._deleting: set[str] = set()
        self._jobs: dict[str, asyncio.Task] = {}  # index -> the job this process runs
        self._loop: asyncio.Task | None = None
        self._beat_at = 0.0
        self._books_ok = False
        self._wake = asyncio.Event()
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

    # -- books -------------------------------------------------------------------------------------
    def _remember(self, name: str, data: dict | None) -> Book | None:
        old = self._books.pop(name, None)
        if old is not None:
            for v in old.versions:
                self.models.forget(v.physical)
        if data is None or data.get("deleting"):
            if data is not None:
                self._deleting.add(name)
            return None
        self._deleting.discard(name)
        book = Book.from_dict(data)
        self._books[name] = book
        for v in book.versions:
            if v.model is not None:
                self.models.record(v.physical, v.model)
        return book

    async def _reload(self) -> None:
        found = await self.books.all()
        for name in set(self._books) - set(found):
            self._remember(name, None)
        for name, data in found.items():
            if name != bk.REPLICAS:
                self._remember(name, data)
        self._books_ok = True

    async def _update(self, name: str, change: Callable[[Book | None], Book | dict | None]) -> Book | None:
        """Change one book atomically (the store's lock); returns and caches the new book."""
        def apply(data: dict | None) -> dict | None:
            current = None if data is None or data.get("deleting") else Book.from_dict(data)
            if data is not None and data.get("deleting"):
                raise Conflict(f"Index '{name}' is being deleted.")
            new = change(current)
            return new.to_dict() if isinstance(new, Book) else new

        data = await self.books.update(name, apply)
        return self._remember(name, data)

    async def book(self, name: str) -> Book:
        """The index's book (an external store is asked on a miss: another replica may have made it)."""
        found = self._books.get(name)
        if found is None and self.shared:
            found = self._remember(name, await self.books.get(name))
        if found is None:
            if name in self.inner.corrupt:  # FAISS: the 409 that says why it was not loaded
                raise disk.unloadable(name, self.inner.corrupt[name])
            raise NotFound(f"No such index: '{name}' exists.")
        return found

    async def _fresh(self, name: str) -> Book | None:
        """The book as stored now (external stores: read again; FAISS: this process is its only writer)."""
        if self.shared:
            return self._remember(name, await self.books.get(name))
        return self._books.get(name)

    # -- lookup ------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        corrupt = self.inner.corrupt
        return sorted(n for n, b in self._books.items() if b.live_version.physical not in corrupt)

    async def list_names(self) -> list[str]:
        if self.shared:
            await self._reload()
        return self.names()

    def exists(self, name: str) -> bool:
        return name in self._books and self._books[name].live_version.physical not in self.inner.corrupt

    async def health(self) -> str | None:
        return await self.inner.health()

    def status(self) -> dict:
        inner = self.inner.status()
        counts = inner.get("indexes", {})
        indexes = {}
        target = self.embedders.target.key
        for name, book in sorted(self._books.items()):
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
            await self._reload()
            return
        await self.inner.start()
        try:
            await self._prepare()
        except EngineError as exc:  # an external store down at start: the loop tries again
            log.error("index versions not loaded yet: %s", exc.message)
        self._loop = asyncio.create_task(self._run(), name="index-versions")

    async def _prepare(self) -> None:
        await self._reload()
        await self._finish_deletes()
        await self._adopt()
        await self._collect()
        await self._follow_target()

    async def close(self) -> None:
        tasks = [t for t in (self._loop, *self._jobs.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.inner.close()

    async def _physicals(self) -> list[str]:
        return await self.inner.list_names() if self.shared else self.inner.names()

    async def _adopt(self) -> None:
        """Indexes made before versions existed (or by ``ragengine migrate``) get a book: version 1, with the
        engine's model when the dimensions agree, else an unknown model (re-indexed from its text)."""
        target = self.embedders.target.key
        for physical in await self._physicals():
            if bk.is_internal(physical) or physical in self._books or physical in self._deleting:
                continue
            dim = await self.inner.dim_of(physical)
            if dim is None:
                continue
            model = target if dim == self.embedders.default.dim else None
            book = bk.new_book(physical, model, dim, await self.inner.config_of(physical), time.time())
            if model is None:
                log.warning("index %r holds %d-dimensional vectors, the engine's model %r makes %d: it is re-indexed "
                            "to that model from its stored text", physical, dim, target, self.embedders.default.dim)
            await self._update(physical, _or(book))

    async def _collect(self) -> None:
        """Drop physical indexes no book refers to: what a crash left of a dropped version, a replaced index, a
        load or an import (on FAISS also those a crash left unreadable: a load cut short in its copy)."""
        used = {p for b in self._books.values() for p in b.physicals()}
        now = time.time()
        leftovers = [p for p in self.inner.corrupt if bk.is_internal(p)]
        for physical in await self._physicals() + leftovers:
            name = bk.logical_name(physical)
            if physical in used or name in self._deleting or (not bk.is_internal(physical) and name not in self._books):
                continue
            rest = physical.split(bk.SEP, 1)[1] if bk.is_internal(physical) else ""
            if rest.startswith("import-") and self.shared:
                started = float(rest.split("-")[1]) if rest.split("-")[1].isdigit() else 0.0
                if now - started < IMPORT_STALE_S:
                    continue  # an import under way (perhaps on another replica)
            log.info("dropping index %r: no version of %r refers to it", physical, name)
            with contextlib.suppress(NotFound):
                await self.inner.delete_index(physical)

    async def _finish_deletes(self) -> None:
        """Indexes whose delete a crash cut short (their book still says ``deleting``): finish it, so the name
        does not stay taken by an index nobody sees."""
        for name, data in (await self.books.all()).items():
            if name == bk.REPLICAS or not data.get("deleting"):
                continue
            log.info("index %r: finishing its delete", name)
            for v in Book.from_dict(data).versions:
                with contextlib.suppress(NotFound):
                    await self.inner.delete_index(v.physical)
            await self.books.update(name, lambda cur: None if cur is not None and cur.get("deleting") else cur)
            self._remember(name, None)
            self._deleting.discard(name)

    # -- the target model ------------------------------------------------------------------------------
    async def set_target(self, ref: ModelRef, generation: int | None) -> None:
        """A new target model (the embedding file changed): load it, then re-index every index to it."""
        embedder = await self.embedders.get(ref.key)
        self.embedders.target = ref
        self.generation = generation
        log.info("embedding model is now %r (dim %d, generation %s)", ref.key, embedder.dim, generation)
        await self._follow_target()

    async def _follow_target(self) -> None:
        if not self.settings.reindex_on_model_change:
            return
        key, generation = self.embedders.target.key, self.generation
        for name in list(self._books):
            book = self._books.get(name)
            if book is None or not bk.follows_target(book, key, generation):
                continue
            try:
                await self._start_following(name, key, generation)
            except EngineError as exc:
                log.warning("index %r not re-indexed to %r: %s", name, key, exc.message)
        self._wake.set()

    async def _start_following(self, name: str, key: str, generation: int | None) -> None:
        embedder = await self.embedders.get(key)
        config = await self._config_for(name, embedder, None)
        dropped: list[bk.Version] = []

        def change(book: Book | None) -> Book | None:
            if book is None or not bk.follows_target(book, key, generation):
                return book
            job = book.running_job
            if job is not None and book.version(job.version).model != key:
                book, gone = bk.cancel(book, f"superseded by the embedding model {key!r}", time.time())
                dropped.extend(gone)
            book = bk.follow_target(book, key, generation)
            if book.live_version.model != key and book.running_job is None:
                book = bk.start_reindex(book, key, embedder.dim, config, uuid.uuid4().hex[:12], time.time(),
                                        self.default_gate(name))
                log.info("index %r: re-indexing to %r as version %d", name, key, book.running_job.version)  # type: ignore[union-attr]
            return book

        await self._update(name, change)
        await self._drop(dropped)

    async def _config_for(self, name: str, embedder: Embedder, chunking: dict | None) -> dict:
        """A new version's chunking: the live version's, with ``chunking`` over it, fitted to ``embedder``."""
        book = await self.book(name)
        try:
            live = await self.inner.config_of(book.live_version.physical)
        except NotFound:
            live = book.live_version.chunking
        merged = {**live, **{k: v for k, v in (chunking or {}).items() if v is not None}}
        return new_index_config(self.settings, merged, embedder.chunk_token_limit).to_dict()

    # -- writes ------------------------------------------------------------------------------------
    async def _create(self, name: str, chunking: dict | None) -> Book:
        embedder = self.embedders.default
        config = new_index_config(self.settings, chunking, embedder.chunk_token_limit).to_dict()
        book = bk.new_book(name, self.embedders.target.key, embedder.dim, config, time.time())
        book = bk.follow_target(book, self.embedders.target.key, self.generation)
        made = await self._update(name, lambda cur: cur or book)
        assert made is not None
        return made

    def _writable(self, book: Book) -> bk.Version:
        live = book.live_version
        if live.model is None:
            raise Conflict(self._unknown_model(book))
        return live

    def _unknown_model(self, book: Book) -> str:
        live, job = book.live_version, book.running_job
        how = (f"; it serves again when its re-index to version {job.version} completes ({job.done} of {job.total} "
               "documents)" if job else "; re-index it (POST /indexes/{name}/reindex)")
        return (f"Index '{book.name}' holds {live.dim}-dimensional vectors of an embedding model the engine does "
                f"not know{how}.")

    async def add_documents(self, index_name: str, documents: list[dict], chunking: dict | None = None) -> list[dict]:
        disk.validate_name(index_name)
        if not documents:
            return []
        created = False
        if index_name not in self._books:
            found = await self._fresh(index_name) if self.shared else None
            if found is None:
                clean_documents(documents, max_chars=self.settings.max_document_chars)  # 4xx before a book exists
                await self._create(index_name, chunking)
                created = True
        book = await self.book(index_name)
        live = self._writable(book)
        try:
            out = await self.inner.add_documents(live.physical, documents, chunking)
        except Exception:
            if created:
                await self._uncreate(index_name)
            raise
        await self._mirror(index_name, live.physical, [d["doc_id"] for d in out])
        return out

    async def _uncreate(self, name: str) -> None:
        """A first write that failed leaves no index behind (as before versions existed)."""
        book = self._books.get(name)
        if book is None:
            return
        counts = (await self.inner.digests(book.live_version.physical)) if self.inner.exists(book.live_version.physical) else {}
        if not counts:
            await self._update(name, lambda cur: None if cur is not None and cur.live == 1 and cur.running_job is None
                               else cur)
            with contextlib.suppress(NotFound):
                await self.inner.delete_index(book.live_version.physical)

    async def add_precomputed(self, index_name: str, texts: list[str], vectors: np.ndarray,
                              metadatas: list[dict] | None = None) -> None:
        """One-chunk documents with given unit vectors, which must come from the engine's model (benchmarks)."""
        disk.validate_name(index_name)
        if index_name not in self._books:
            await self._create(index_name, None)
        book = await self.book(index_name)
        live = self._writable(book)
        await self.inner.add_precomputed(live.physical, texts, vectors, metadatas)
        await self._mirror(index_name, live.physical, [content_id(t) for t in texts])

    async def update_documents(self, index_name: str, documents: list[dict]) -> dict:
        book = await self.book(index_name)
        live = self._writable(book)
        out = await self.inner.update_documents(live.physical, documents)
        await self._mirror(index_name, live.physical, [d["doc_id"] for d in out["updated_documents"]])
        return out

    async def update_metadata(self, index_name: str, documents: list[dict]) -> dict:
        book = await self.book(index_name)
        live = self._writable(book)
        out = await self.inner.update_metadata(live.physical, documents)
        await self._mirror(index_name, live.physical, [d["doc_id"] for d in out["updated_documents"]])
        return out

    async def delete_documents(self, index_name: str, doc_ids: list[str]) -> dict:
        book = await self.book(index_name)
        live = book.live_version
        out = await self.inner.delete_documents(live.physical, doc_ids)
        await self._mirror(index_name, live.physical, out["deleted_doc_ids"])
        return out

    async def _mirror(self, name: str, written: str, doc_ids: list[str]) -> None:
        """Make every other version that takes writes hold what ``written`` now holds of ``doc_ids``."""
        if not doc_ids:
            return
        book = await self._fresh(name)
        if book is None:
            return
        for target in book.write_targets():
            if target.physical == written:
                continue
            try:
                await self._copy(written, target, doc_ids)
            except Exception as exc:
                if book.live == target.version:  # the write crossed a swap: the live version must have it
                    raise
                # A version being built: its next comparison pass copies what this write left out.
                log.warning("write to %r not mirrored to version %d yet (%s): the build catches up", name,
                            target.version, exc)

    async def _copy(self, source: str, target: bk.Version, doc_ids: list[str]) -> None:
        docs = await self.inner.fetch(source, doc_ids)
        if docs:
            await self.inner.sync_documents(target.physical, list(docs.values()), chunking=target.chunking, source=source)
        gone = [d for d in doc_ids if d not in docs]
        if gone and self.inner.exists(target.physical):
            await self.inner.delete_documents(target.physical, gone)

    async def delete_index(self, name: str) -> None:
        if name not in self._books and name in self.inner.corrupt and not self.shared:
            await self.inner.delete_index(name)  # an index that could not be loaded, made before versions
            return
        book = await self.book(name)

        def mark(data: dict | None) -> dict | None:
            if data is None:
                raise NotFound(f"No such index: '{name}' exists.")
            return {**data, "deleting": True}

        await self.books.update(name, mark)
        self._remember(name, {"deleting": True})
        task = self._jobs.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop(list(book.versions))
        await self.books.update(name, lambda _data: None)
        self._remember(name, None)
        self._deleting.discard(name)
        metrics.forget_index(name)

    async def _drop(self, versions: list[bk.Version]) -> None:
        for v in versions:
            with contextlib.suppress(NotFound):
                await self.inner.delete_index(v.physical)
            log.info("index version %r dropped", v.physical)
        if versions:
            self.embedders.release_unused({m for b in self._books.values() for m in b.models()})

    # -- /persist and /load (FAISS) ------------------------------------------------------------------
    async def persist(self, name: str, path: str | None) -> str:
        book = await self.book(name)
        return await self.inner.persist(book.live_version.physical, path)

    async def load(self, name: str, path: str | None, overwrite: bool) -> str:
        """Index ``name`` from a ``/persist`` copy, replacing the index with ``overwrite``. The copy is checked and
        read into a hidden index first (a bad path, a missing folder or a damaged copy is refused there, with
        nothing touched), then becomes the index in one book write; the old versions are dropped after it (a
        crash between the two leaves them to ``_collect`` at the next start). Never a moment without the index."""
        disk.validate_name(name)
        if name in self._books and not overwrite:
            raise Conflict(f"Index '{name}' already exists. Use a different name or delete the existing index first.")
        hidden = f"{name}{bk.SEP}load-{int(time.time())}-{uuid.uuid4().hex[:8]}"
        old: list[bk.Version] = []
        try:
            where = await self.inner.load(hidden, path if path is not None else disk.dir_name(name))
            dim = await self.inner.dim_of(hidden)
            model = self.embedders.target.key if dim == self.embedders.default.dim else None
            fresh = bk.new_book(name, model, int(dim or 0), await self.inner.config_of(hidden), time.time())
            fresh = bk.follow_target(fresh, self.embedders.target.key, self.generation)
            fresh = dataclasses.replace(fresh, versions=(dataclasses.replace(fresh.versions[0], physical=hidden),))

            def swap(cur: Book | None) -> Book:
                if cur is not None:
                    if not overwrite:
                        raise Conflict(f"Index '{name}' was created while the copy was read: nothing was loaded.")
                    old.extend(cur.versions)
                return fresh

            await self._update(name, swap)
        except BaseException:
            with contextlib.suppress(Exception):
                if self.inner.exists(hidden):
                    await self.inner.delete_index(hidden)
            raise
        task = self._jobs.pop(name, None)  # a job of the replaced index has nothing left to build
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._drop(old)
        if name in self.inner.corrupt:  # an index made before versions that could not be loaded: replaced now
            with contextlib.suppress(NotFound):
                await self.inner.delete_index(name)
        return where

    # -- reads -------------------------------------------------------------------------------------
    async def _live(self, name: str) -> bk.Version:
        book = await self.book(name)
        live = book.live_version
        if live.model is None:
            raise Conflict(self._unknown_model(book))
        SERVED.set((live.version, live.model))
        return live

    async def chunking(self, name: str) -> ChunkingConfig | None:
        """How the index's live version splits documents; None when there is no such index."""
        book = await self._fresh(name) if self.shared else self._books.get(name)
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
            self._remember(index_name, await self.books.get(index_name))
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
        book = await self._fresh(name) if self.shared else None
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
        book = await self._fresh(name) if self.shared else None
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
        config = await self._config_for(name, embedder, chunking)
        started: list[bool] = []

        def change(cur: Book | None) -> Book:
            book = _exists(cur, name)
            job = book.running_job
            have = [book.live_version] + ([book.version(job.version)] if job is not None else [])
            if only_if_changed and any((v.model, v.chunking) == (key, config) for v in have):
                return book
            started.append(True)
            return bk.start_reindex(book, key, embedder.dim, config, uuid.uuid4().hex[:12], time.time(), gate)

        new = await self._update(name, change)
        assert new is not None
        if started:
            log.info("index %r: re-index to version %d (model %r) started", name, new.running_job.version, key)  # type: ignore[union-attr]
            self._wake.set()
        return bk.summary(new, target_model=self.embedders.target.key), bool(started)

    async def activate(self, name: str, version: int) -> dict:
        new = await self._update(name, lambda cur: bk.start_activate(_exists(cur, name), version, uuid.uuid4().hex[:12],
                                                                     time.time()))
        assert new is not None
        self._wake.set()
        return bk.summary(new, target_model=self.embedders.target.key)

    async def drop_version(self, name: str, version: int) -> dict:
        gone: list[bk.Version] = []

        def change(cur: Book | None) -> Book:
            book, dropped = bk.drop_version(_exists(cur, name), version)
            gone.append(dropped)
            return book

        new = await self._update(name, change)
        await self._drop(gone)
        assert new is not None
        return bk.summary(new, target_model=self.embedders.target.key)

    async def wait_idle(self, name: str, timeout_s: float) -> Book:
        """The book once no job runs on the index (tests and the CLI; the API answers 202 at once)."""
        deadline = time.monotonic() + timeout_s
        while True:
            book = await self._fresh(name) or await self.book(name)
            if book.running_job is None:
                return book
            if time.monotonic() > deadline:
                raise TimeoutError(f"index {name!r}: {book.running_job}")
            await asyncio.sleep(0.1)

    # -- export and import ---------------------------------------------------------------------------
    async def export(self, name: str) -> AsyncIterator[bytes]:
        book = await self.book(name)
        live = book.live_version
        if live.model is None:
            raise Conflict(self._unknown_model(book))
        config = await self.inner.config_of(live.physical)
        ref = ModelRef.parse(live.model)
        head = archive.header(name, config, {"key": live.model, **ref.to_dict(), "dim": live.dim}, time.time())
        return archive.encode(head, self.inner.export_batches(live.physical))

    async def import_(self, name: str, body: AsyncIterator[bytes]) -> dict:
        """Read an export as it arrives into a hidden index; it becomes index ``name`` (version 1) only once the
        whole file checked out. Vectors are kept when the export's model is the engine's, else re-embedded."""
        disk.validate_name(name)
        if name in self._books or (self.shared and await self._fresh(name) is not None):
            raise Conflict(f"Index '{name}' already exists: delete it first, or import under another name.")
        target = self.embedders.target
        embedder = self.embedders.default
        physical = f"{name}{bk.SEP}import-{int(time.time())}-{uuid.uuid4().hex[:8]}"
        self.models.record(physical, target.key)
        # Each line checked as POST /index checks a document; a line no valid document needs is refused early.
        reader = archive.ArchiveReader(archive.line_limit(self.settings.max_document_chars, self.settings.max_body_bytes),
                                       max_chars=self.settings.max_document_chars)
        reuse: bool | None = None
        config: dict | None = None
        try:
            async for data in body:
                for docs in reader.batches(data):
                    if reuse is None:
                        assert reader.header is not None, "documents come after the header"
                        reuse, config = await self._import_target(physical, reader.header)
                    assert config is not None, "set with reuse, from the header"
                    if reuse:
                        await self.inner.import_batch(physical, config, docs)
                    else:
                        await self.inner.sync_documents(physical, [NewDoc(d["id"], d["text"], d["meta"]) for d in docs],
                                                        chunking=config)
                if reader.header is not None and reuse is None:
                    reuse, config = await self._import_target(physical, reader.header)
            trailer = reader.finish()
            assert config is not None
            dim = await self.inner.dim_of(physical) or embedder.dim
            fresh = bk.follow_target(bk.new_book(name, target.key, dim, config, time.time()), target.key, self.generation)
            fresh = dataclasses.replace(fresh, versions=(dataclasses.replace(fresh.versions[0], physical=physical),))

            def commit(cur: Book | None) -> Book:
                if cur is not None:
                    raise Conflict(f"Index '{name}' was created while the import ran: nothing was imported.")
                return fresh

            await self._update(name, commit)
        except BaseException:
            self.models.forget(physical)
            with contextlib.suppress(Exception):
                if self.inner.exists(physical):
                    await self.inner.delete_index(physical)
            raise
        head = reader.header or {}
        return {"index": name, "documents": trailer["documents"], "chunks": trailer["chunks"],
                "vectors": "reused" if reuse else "re-embedded", "source_index": head.get("index"),
                "source_embedding_model": (head.get("embedding") or {}).get("key"), "embedding_model": target.key}

    async def _import_target(self, physical: str, head: dict) -> tuple[bool, dict]:
        """Whether an import keeps the export's vectors (same model), and the hidden index's chunking."""
        target, embedder = self.embedders.target, self.embedders.default
        emb = head["embedding"]
        reuse = emb.get("key") == target.key and emb.get("dim") == embedder.dim
        config = head["chunking"] if reuse else new_index_config(self.settings, head["chunking"],
                                                                 embedder.chunk_token_limit).to_dict()
        await self.inner.ensure(physical, config)
        return reuse, config

    # -- the background loop -------------------------------------------------------------------------
    async def _run(self) -> None:
        from ragengine.versions.builder import run_job

        while True:
            try:
                if self.shared:
                    if not self._books_ok:
                        await self._prepare()
                    else:
                        await self._reload()
                        await self._adopt()
                    await self._heartbeat()
                    await self._preload()
                for name, book in list(self._books.items()):
                    job = book.running_job
                    task = self._jobs.get(name)
                    if job is None or (task is not None and not task.done()):
                        continue
                    claimed = await self._claim(name, job.id)
                    if claimed is not None:
                        self._jobs[name] = asyncio.create_task(run_job(self, name, job.id), name=f"job-{name}")
            except EngineError as exc:
                log.warning("index versions: %s", exc.message)
            except Exception:
                log.exception("index versions loop")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), LOOP_S if self.shared else 5 * LOOP_S)

    async def _claim(self, name: str, job_id: str) -> Book | None:
        taken: list[Book] = []

        def change(cur: Book | None) -> Book | None:
            if cur is None:
                return None
            new = bk.claim(cur, job_id, self.replica, time.time(), self.lease_s)
            if new is None:
                return cur
            taken.append(new)
            return new

        await self._update(name, change)
        return taken[0] if taken else None

    async def _heartbeat(self) -> None:
        now = time.time()
        if now - self._beat_at < HEARTBEAT_S:
            return
        self._beat_at = now
        mine = {"models": self.embedders.keys(), "seen": now}

        def change(data: dict | None) -> dict:
            replicas = {k: v for k, v in ((data or {}).get("replicas") or {}).items() if now - v.get("seen", 0) < 60}
            return {"name": bk.REPLICAS, "replicas": {**replicas, self.replica: mine}}

        await self.books.update(bk.REPLICAS, change)

    async def replicas_without(self, model: str) -> list[str]:
        """External stores: the replicas seen lately that have not loaded ``model`` yet."""
        data = await self.books.get(bk.REPLICAS) or {}
        now = time.time()
        return sorted(k for k, v in (data.get("replicas") or {}).items()
                      if now - v.get("seen", 0) < 3 * HEARTBEAT_S and model not in (v.get("models") or []))

    async def _preload(self) -> None:
        """Load every model a live or building version needs, before a query or a swap asks for it."""
        for key in sorted({m for b in self._books.values() for m in b.models()} - set(self.embedders.keys())):
            with contextlib.suppress(EngineError):
                await self.embedders.get(key)
                self._beat_at = 0.0  # say so at once


def _or(book: Book) -> Callable[[Book | None], Book]:
    return lambda cur: cur or book


def _numbers(book: Book) -> set[int]:
    return {v.version for v in book.versions}


def _exists(book: Book | None, name: str) -> Book:
    if book is None:
        raise NotFound(f"No such index: '{name}' exists.")
    return book

