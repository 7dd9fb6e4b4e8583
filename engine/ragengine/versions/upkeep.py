"""The version layer's background work: what a start tidies up, the loop that starts jobs, and the target model.

- At start (and on an external store, until the books could be read): finish deletes a crash cut short, give
  indexes made before versions a book (``adopt``), drop physical indexes no book refers to (``collect``),
  and re-index what does not follow the target model.
- The loop (every ``LOOP_S``, or at once when ``state.wake`` is set): on an external store it reads the
  books again, says which models this replica has loaded (``heartbeat``) and loads those the books need;
  then it claims each running job no task of this process runs and starts it (``launch``: ``builder.run_job``).
- ``set_target``: a new embedding model (the embedding file); every index following the target is re-indexed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from ragengine.embedding.pool import ModelRef
from ragengine.errors import EngineError, NotFound
from ragengine.versions import book as bk
from ragengine.versions.book import Book
from ragengine.versions.state import VersionState

log = logging.getLogger(__name__)
LOOP_S = 1.0  # how often jobs, targets and (external stores) the books are looked at
HEARTBEAT_S = 5.0  # external stores: how often a replica says which models it has loaded
IMPORT_STALE_S = 24 * 3600.0  # a hidden import index older than this is a crashed import's: dropped


class Upkeep:
    def __init__(self, state: VersionState, gate: Callable[[str], dict | None],
                 launch: Callable[[str, str], Coroutine[Any, Any, None]]) -> None:
        """``gate``: the gate an index's re-index gets (the evaluation service's default); ``launch``: runs one
        job of an index (name, job id) to its end."""
        self.state = state
        self.gate = gate
        self.launch = launch
        self._beat_at = 0.0

    async def prepare(self) -> None:
        await self.state.reload()
        await self._finish_deletes()
        await self._adopt()
        await self._collect()
        await self.follow_target()

    async def _adopt(self) -> None:
        """Indexes made before versions existed (or by ``ragengine migrate``) get a book: version 1, with the
        engine's model when the dimensions agree, else an unknown model (re-indexed from its text)."""
        state = self.state
        target = state.embedders.target.key
        for physical in await state.physicals():
            if bk.is_internal(physical) or physical in state.cache or physical in state.deleting:
                continue
            dim = await state.inner.dim_of(physical)
            if dim is None:
                continue
            model = target if dim == state.embedders.default.dim else None
            book = bk.new_book(physical, model, dim, await state.inner.config_of(physical), time.time())
            if model is None:
                log.warning("index %r holds %d-dimensional vectors, the engine's model %r makes %d: it is re-indexed "
                            "to that model from its stored text", physical, dim, target, state.embedders.default.dim)
            await state.update(physical, _or(book))

    async def _collect(self) -> None:
        """Drop physical indexes no book refers to: what a crash left of a dropped version, a replaced index, a
        load or an import (on FAISS also those a crash left unreadable: a load cut short in its copy)."""
        state = self.state
        used = {p for b in state.cache.values() for p in b.physicals()}
        now = time.time()
        leftovers = [p for p in state.inner.corrupt if bk.is_internal(p)]
        for physical in await state.physicals() + leftovers:
            name = bk.logical_name(physical)
            if physical in used or name in state.deleting or (not bk.is_internal(physical) and name not in state.cache):
                continue
            rest = physical.split(bk.SEP, 1)[1] if bk.is_internal(physical) else ""
            if rest.startswith("import-") and state.shared:
                started = float(rest.split("-")[1]) if rest.split("-")[1].isdigit() else 0.0
                if now - started < IMPORT_STALE_S:
                    continue  # an import under way (perhaps on another replica)
            log.info("dropping index %r: no version of %r refers to it", physical, name)
            with contextlib.suppress(NotFound):
                await state.inner.delete_index(physical)

    async def _finish_deletes(self) -> None:
        """Indexes whose delete a crash cut short (their book still says ``deleting``): finish it, so the name
        does not stay taken by an index nobody sees."""
        state = self.state
        for name, data in (await state.books.all()).items():
            if name == bk.REPLICAS or not data.get("deleting"):
                continue
            log.info("index %r: finishing its delete", name)
            for v in Book.from_dict(data).versions:
                with contextlib.suppress(NotFound):
                    await state.inner.delete_index(v.physical)
            await state.books.update(name, lambda cur: None if cur is not None and cur.get("deleting") else cur)
            state.remember(name, None)
            state.deleting.discard(name)

    # -- the target model ------------------------------------------------------------------------------
    async def set_target(self, ref: ModelRef, generation: int | None) -> None:
        """A new target model (the embedding file changed): load it, then re-index every index to it."""
        state = self.state
        embedder = await state.embedders.get(ref.key)
        state.embedders.target = ref
        state.generation = generation
        log.info("embedding model is now %r (dim %d, generation %s)", ref.key, embedder.dim, generation)
        await self.follow_target()

    async def follow_target(self) -> None:
        state = self.state
        if not state.settings.reindex_on_model_change:
            return
        key, generation = state.embedders.target.key, state.generation
        for name in list(state.cache):
            book = state.cache.get(name)
            if book is None or not bk.follows_target(book, key, generation):
                continue
            try:
                await self._start_following(name, key, generation)
            except EngineError as exc:
                log.warning("index %r not re-indexed to %r: %s", name, key, exc.message)
        state.wake.set()

    async def _start_following(self, name: str, key: str, generation: int | None) -> None:
        embedder = await self.state.embedders.get(key)
        config = await self.state.config_for(name, embedder, None)
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
                                        self.gate(name))
                log.info("index %r: re-indexing to %r as version %d", name, key, book.running_job.version)  # type: ignore[union-attr]
            return book

        await self.state.update(name, change)
        await self.state.drop(dropped)

    # -- the loop --------------------------------------------------------------------------------------
    async def run(self) -> None:
        state = self.state
        while True:
            try:
                if state.shared:
                    if not state.books_ok:
                        await self.prepare()
                    else:
                        await state.reload()
                        await self._adopt()
                    await self._heartbeat()
                    await self._preload()
                for name, book in list(state.cache.items()):
                    job = book.running_job
                    task = state.jobs.get(name)
                    if job is None or (task is not None and not task.done()):
                        continue
                    claimed = await self._claim(name, job.id)
                    if claimed is not None:
                        state.jobs[name] = asyncio.create_task(self.launch(name, job.id), name=f"job-{name}")
            except EngineError as exc:
                log.warning("index versions: %s", exc.message)
            except Exception:
                log.exception("index versions loop")
            state.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.wake.wait(), LOOP_S if state.shared else 5 * LOOP_S)

    async def _claim(self, name: str, job_id: str) -> Book | None:
        state = self.state
        taken: list[Book] = []

        def change(cur: Book | None) -> Book | None:
            if cur is None:
                return None
            new = bk.claim(cur, job_id, state.replica, time.time(), state.lease_s)
            if new is None:
                return cur
            taken.append(new)
            return new

        await state.update(name, change)
        return taken[0] if taken else None

    async def _heartbeat(self) -> None:
        now = time.time()
        if now - self._beat_at < HEARTBEAT_S:
            return
        self._beat_at = now
        replica = self.state.replica
        mine = {"models": self.state.embedders.keys(), "seen": now}

        def change(data: dict | None) -> dict:
            replicas = {k: v for k, v in ((data or {}).get("replicas") or {}).items() if now - v.get("seen", 0) < 60}
            return {"name": bk.REPLICAS, "replicas": {**replicas, replica: mine}}

        await self.state.books.update(bk.REPLICAS, change)

    async def replicas_without(self, model: str) -> list[str]:
        """External stores: the replicas seen lately that have not loaded ``model`` yet."""
        data = await self.state.books.get(bk.REPLICAS) or {}
        now = time.time()
        return sorted(k for k, v in (data.get("replicas") or {}).items()
                      if now - v.get("seen", 0) < 3 * HEARTBEAT_S and model not in (v.get("models") or []))

    async def _preload(self) -> None:
        """Load every model a live or building version needs, before a query or a swap asks for it."""
        embedders = self.state.embedders
        for key in sorted({m for b in self.state.cache.values() for m in b.models()} - set(embedders.keys())):
            with contextlib.suppress(EngineError):
                await embedders.get(key)
                self._beat_at = 0.0  # say so at once


def _or(book: Book) -> Callable[[Book | None], Book]:
    return lambda cur: cur or book
