"""What one process knows of the index versions: the books it read (a cache of ``books.Books``), the indexes
being deleted, the jobs it runs, and the few book operations every part of the version layer shares.

``VersionState`` is owned by ``registry.VersionedRegistry`` (the index API) and handed to its parts: the
background upkeep (``upkeep.Upkeep``), exports and imports (``transfer``) and the jobs (``builder``, through
``reg.state``). Each book change goes through ``update`` (the store's lock, then this cache), so all of them
see the same books.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from ragengine.errors import Conflict, NotFound
from ragengine.index import disk
from ragengine.index.api import PhysicalIndexes
from ragengine.index.chunking import new_index_config
from ragengine.index.models import IndexModels
from ragengine.settings import EngineSettings
from ragengine.versions import book as bk
from ragengine.versions.book import Book
from ragengine.versions.books import Books

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder

log = logging.getLogger(__name__)


class VersionState:
    def __init__(self, settings: EngineSettings, inner: PhysicalIndexes, models: IndexModels, books: Books, *,
                 shared: bool, generation: int | None) -> None:
        self.settings = settings
        self.inner = inner
        self.models = models
        self.embedders = models.pool
        self.books = books
        self.shared = shared  # an external store: other replicas may run jobs and write books
        self.replica = uuid.uuid4().hex[:12]
        # One process per FAISS data directory: no one to wait for, a restarted process resumes at once.
        self.lease_s = float(settings.reindex_lease_s) if shared else 0.0
        self.generation = generation  # the embedding file's generation of the target model (None: the settings')
        self.cache: dict[str, Book] = {}
        self.deleting: set[str] = set()
        self.jobs: dict[str, asyncio.Task] = {}  # index -> the job this process runs
        self.books_ok = False
        self.wake = asyncio.Event()  # the upkeep loop looks at once (a job started, a target changed)

    def remember(self, name: str, data: dict | None) -> Book | None:
        old = self.cache.pop(name, None)
        if old is not None:
            for v in old.versions:
                self.models.forget(v.physical)
        if data is None or data.get("deleting"):
            if data is not None:
                self.deleting.add(name)
            return None
        self.deleting.discard(name)
        book = Book.from_dict(data)
        self.cache[name] = book
        for v in book.versions:
            if v.model is not None:
                self.models.record(v.physical, v.model)
        return book

    async def reload(self) -> None:
        found = await self.books.all()
        for name in set(self.cache) - set(found):
            self.remember(name, None)
        for name, data in found.items():
            if name != bk.REPLICAS:
                self.remember(name, data)
        self.books_ok = True

    async def update(self, name: str, change: Callable[[Book | None], Book | dict | None]) -> Book | None:
        """Change one book atomically (the store's lock); returns and caches the new book."""
        def apply(data: dict | None) -> dict | None:
            current = None if data is None or data.get("deleting") else Book.from_dict(data)
            if data is not None and data.get("deleting"):
                raise Conflict(f"Index '{name}' is being deleted.")
            new = change(current)
            return new.to_dict() if isinstance(new, Book) else new

        data = await self.books.update(name, apply)
        return self.remember(name, data)

    async def book(self, name: str) -> Book:
        """The index's book (an external store is asked on a miss: another replica may have made it)."""
        found = self.cache.get(name)
        if found is None and self.shared:
            found = self.remember(name, await self.books.get(name))
        if found is None:
            if name in self.inner.corrupt:  # FAISS: the 409 that says why it was not loaded
                raise disk.unloadable(name, self.inner.corrupt[name])
            raise NotFound(f"No such index: '{name}' exists.")
        return found

    async def fresh(self, name: str) -> Book | None:
        """The book as stored now (external stores: read again; FAISS: this process is its only writer)."""
        if self.shared:
            return self.remember(name, await self.books.get(name))
        return self.cache.get(name)

    def names(self) -> list[str]:
        corrupt = self.inner.corrupt
        return sorted(n for n, b in self.cache.items() if b.live_version.physical not in corrupt)

    def exists(self, name: str) -> bool:
        return name in self.cache and self.cache[name].live_version.physical not in self.inner.corrupt

    async def physicals(self) -> list[str]:
        return await self.inner.list_names() if self.shared else self.inner.names()

    async def drop(self, versions: list[bk.Version]) -> None:
        for v in versions:
            with contextlib.suppress(NotFound):
                await self.inner.delete_index(v.physical)
            log.info("index version %r dropped", v.physical)
        if versions:
            self.embedders.release_unused({m for b in self.cache.values() for m in b.models()})

    async def stop_job(self, name: str) -> None:
        """Cancel the job this process runs on the index, if any (its index is deleted or replaced)."""
        task = self.jobs.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def unknown_model(self, book: Book) -> str:
        live, job = book.live_version, book.running_job
        how = (f"; it serves again when its re-index to version {job.version} completes ({job.done} of {job.total} "
               "documents)" if job else "; re-index it (POST /indexes/{name}/reindex)")
        return (f"Index '{book.name}' holds {live.dim}-dimensional vectors of an embedding model the engine does "
                f"not know{how}.")

    async def config_for(self, name: str, embedder: Embedder, chunking: dict | None) -> dict:
        """A new version's chunking: the live version's, with ``chunking`` over it, fitted to ``embedder``."""
        book = await self.book(name)
        try:
            live = await self.inner.config_of(book.live_version.physical)
        except NotFound:
            live = book.live_version.chunking
        merged = {**live, **{k: v for k, v in (chunking or {}).items() if v is not None}}
        return new_index_config(self.settings, merged, embedder.chunk_token_limit).to_dict()


def must_exist(book: Book | None, name: str) -> Book:
    """``book``, or the 404 of an index that has none."""
    if book is None:
        raise NotFound(f"No such index: '{name}' exists.")
    return book
