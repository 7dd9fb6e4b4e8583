"""Ingestion of a file into a vector store's index: ``in_progress`` → ``completed`` | ``failed`` | ``cancelled``.

The file's text is the upload's, extracted when it was accepted (``conversations.ingestion``), so a file
can be attached while its own ingestion into the conversations index still runs. Each job:

1. claims the row (``catalog.claim``: one worker on one replica; a dead replica's lease runs out);
2. splits the text with the file's chunking (``objects.effective_chunking``) on the embedding model's
   tokenizer, so a ``static`` strategy holds whatever the index's own chunking;
3. writes one document per chunk, ``<file_id>-<n>``, with metadata ``file_id``, ``filename``, the
   file's attributes (which filters then see) and the chunk's place in the file (``page``,
   ``heading_path``, ...: ``index/places.py``), after deleting what an earlier attempt wrote (ids are
   deterministic: a re-run replaces, never duplicates); in batches, recording the ids and renewing the
   lease after each;
4. ends ``completed`` with ``usage_bytes`` (chunk text plus float32 vectors), or ``failed`` with OpenAI's
   ``last_error``: ``invalid_file`` when the file cannot be used (no text, a refused chunking),
   ``server_error`` when the engine failed (an unreachable store).

A job whose claim is gone (detached, cancelled, attached again) stops at its next step; when detached
or cancelled it removes the chunks it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from ragengine.conversations.store import SessionStore
from ragengine.errors import EngineError, NotFound
from ragengine.index.chunking import Chunker, new_index_config
from ragengine.index.places import chunk_places
from ragengine.index.types import ChunkingConfig
from ragengine.settings import EngineSettings
from ragengine.vectorstores.catalog import Catalog
from ragengine.vectorstores.objects import StoreFileRecord, effective_chunking, static_strategy

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder
    from ragengine.index.api import IndexAPI

log = logging.getLogger(__name__)

BATCH_CHUNKS = 64
MAX_ATTEMPTS = 5


class JobLost(Exception):
    """The claim on a job is no longer this worker's."""


def doc_id(file_id: str, n: int) -> str:
    return f"{file_id}-{n}"


class VectorStoreIngestion:
    def __init__(self, catalog: Catalog, sessions: SessionStore, registry: IndexAPI, embedder: Embedder,
                 settings: EngineSettings) -> None:
        self.catalog = catalog
        self.sessions = sessions
        self.registry = registry
        self.embedder = embedder
        self.settings = settings
        self.lease_s = settings.ingestion_lease_s
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._busy = 0

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(), name=f"vector-store-ingestion-{i}")
                       for i in range(self.settings.ingestion_workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def kick(self) -> None:
        """A job was queued on this replica: idle workers look now (others within ``ingestion_poll_s``)."""
        self._wake.set()

    async def idle(self, timeout_s: float = 120.0) -> None:
        """Wait until no job is left (tests and benchmarks)."""
        async with asyncio.timeout(timeout_s):
            while self._busy or await self.catalog.pending():
                await asyncio.sleep(0.02)

    async def index_chunking(self, store_id: str) -> ChunkingConfig:
        """The index's chunking, or the one a new index gets."""
        config = await self.registry.chunking(store_id)
        if config is not None:
            return config
        return new_index_config(self.settings, None, self.embedder.chunk_token_limit)

    async def _run(self) -> None:
        while True:
            try:
                job = await self.catalog.claim(self.lease_s)
            except Exception as exc:  # the database is away: keep polling
                log.warning("cannot claim vector store jobs: %s", exc.__class__.__name__)
                job = None
            if job is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.ingestion_poll_s)
                continue
            self._busy += 1
            try:
                await self.process(job)
            except asyncio.CancelledError:
                raise
            except Exception:  # process() records failures itself; the last line of defence
                log.exception("vector store ingestion of %s crashed", job.file_id)
            finally:
                self._busy -= 1

    async def process(self, job: StoreFileRecord) -> None:
        if job.attempts > MAX_ATTEMPTS:
            await self._fail(job, "server_error", f"ingestion was interrupted {MAX_ATTEMPTS} times; attach the "
                                                  "file again")
            return
        written: list[str] = []
        try:
            await self._ingest(job, written)
        except JobLost:
            await self._abandon(job, written)
        except EngineError as exc:
            code = "invalid_file" if exc.status_code < 500 else "server_error"
            await self._fail(job, code, exc.message)
        except Exception as exc:
            log.exception("vector store ingestion of %s failed", job.file_id)
            await self._fail(job, "server_error", f"unexpected error: {exc.__class__.__name__}: {exc}")

    async def _ingest(self, job: StoreFileRecord, written: list[str]) -> None:
        try:
            info = await self.sessions.get_file(job.file_id)
        except NotFound:
            raise EngineError(f"the file '{job.file_id}' was deleted", status_code=400) from None
        if info.text is None:
            raise EngineError(f"the file's text could not be read: {info.reason or info.status}", status_code=400)
        config = effective_chunking(job.chunking, await self.index_chunking(job.store_id))
        metadata = {**job.attributes, "file_id": info.id, "filename": info.filename}
        pieces, places = await asyncio.to_thread(_split, Chunker(self.embedder, config), info.text, metadata)
        ours = [doc_id(info.id, n) for n in range(len(pieces))]
        if await self.registry.chunking(job.store_id) is not None:  # what an earlier attempt wrote goes first
            stale = list(dict.fromkeys(list(job.doc_ids) + ours))
            await self.registry.delete_documents(job.store_id, stale)
        for start in range(0, len(pieces), BATCH_CHUNKS):
            ids = ours[start:start + BATCH_CHUNKS]
            docs = [{"doc_id": i, "text": text, "metadata": {**metadata, **place}}
                    for i, text, place in zip(ids, pieces[start:], places[start:], strict=False)]
            await self.registry.add_documents(job.store_id, docs)
            written.extend(ids)
            if not await self.catalog.held(job, self.lease_s, doc_ids={"ids": list(written)}):
                raise JobLost(job.file_id)
        usage = sum(len(p.encode("utf-8")) for p in pieces) + len(pieces) * self.embedder.dim * 4
        done = await self.catalog.held(job, status="completed", usage_bytes=usage, doc_ids={"ids": written},
                                       chunking=static_strategy(config), lease_owner=None, lease_until=None)
        if not done:
            raise JobLost(job.file_id)

    async def _fail(self, job: StoreFileRecord, code: str, message: str) -> None:
        log.warning("vector store %s: file %s failed: %s", job.store_id, job.file_id, message)
        with contextlib.suppress(Exception):
            await self.catalog.held(job, status="failed", error_code=code, error_message=message, lease_owner=None,
                                    lease_until=None)

    async def _abandon(self, job: StoreFileRecord, written: list[str]) -> None:
        """The claim went: the chunks stay only when the file is attached again (its new job replaces them)."""
        with contextlib.suppress(NotFound):
            current = await self.catalog.get_file(job.store_id, job.file_id)
            if current.status == "in_progress":
                return
        if written:
            with contextlib.suppress(EngineError):
                await self.registry.delete_documents(job.store_id, written)
        log.info("vector store %s: ingestion of %s stopped (detached or cancelled)", job.store_id, job.file_id)


def _split(chunker: Chunker, text: str, metadata: dict) -> tuple[list[str], list[dict]]:
    """The file's chunks, and each one's place in the file (its page, heading path, ...): a chunk is a
    document of its own here, so it keeps where it was in its metadata (``index/places.py``)."""
    spans = chunker.split(text, metadata)
    return [s if isinstance(s, str) else text[s[0]:s[1]] for s in spans], chunk_places(text, metadata, spans)
