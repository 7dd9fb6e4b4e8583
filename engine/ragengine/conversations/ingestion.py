"""Background ingestion of uploaded files: ``uploaded`` → ``processing`` → ``completed`` | ``failed``.

Uploads are parsed when accepted (the extracted text is stored at once, so a file is usable inline
from that moment, even while it waits in the queue), written to ``<data_dir>/uploads/<file_id>`` and
queued; ``settings.ingestion_workers`` workers (2 by default, so one large file does not starve the
rest) add the parts to the conversation index in batches, updating ``progress`` after each. Any
error ends the file as ``failed`` with the reason; nothing is left ``processing``: on start the files
found ``uploaded`` or ``processing`` (a crash or restart mid-way) are queued again, and a re-run
first deletes the file's earlier documents (document ids are deterministic).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from ragengine.conversations.store import FileInfo, SessionStore
from ragengine.conversations.uploads import CANONICAL, ParseError, Part, detect_kind, extract
from ragengine.errors import EngineError, PayloadTooLarge
from ragengine.metrics import FILES_INGESTED

log = logging.getLogger(__name__)

PARSE_SHARE = 0.1  # progress reported once the file is parsed; the rest is indexing
BATCH_PARTS = 8


class IngestionWorker:
    def __init__(self, store: SessionStore, registry: Any, settings: Any) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings
        self.index_name = settings.conversation_index
        self.dir = Path(settings.data_dir) / "uploads"
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._busy = 0

    async def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for status in ("processing", "uploaded"):
            for f in await self.store.list_files(status=status, limit=100_000):
                log.info("re-queueing %s file %s after restart", status, f.id)
                self.queue.put_nowait(f.id)
        self._tasks = [asyncio.create_task(self._run(), name=f"conversation-ingestion-{i}")
                       for i in range(self.settings.ingestion_workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def idle(self, timeout_s: float = 60.0) -> None:
        """Wait until the queue is drained (tests and benchmarks)."""
        async with asyncio.timeout(timeout_s):
            while self.queue.qsize() or self._busy:
                await asyncio.sleep(0.02)

    def _path(self, file_id: str) -> Path:
        return self.dir / file_id

    async def accept(self, filename: str, content_type: str | None, data: bytes) -> FileInfo:
        """Validate (413, 415), store the bytes, record the file as ``uploaded`` and queue it."""
        if len(data) > self.settings.max_upload_bytes:
            raise PayloadTooLarge(f"The file is {len(data)} bytes; the limit is {self.settings.max_upload_bytes}.")
        kind = detect_kind(data, filename, content_type)
        try:  # now, not in the queue: the text goes inline until the file is searchable
            text, _ = await asyncio.to_thread(extract, data, kind)
        except ParseError:
            text = None  # the worker records the reason (the file ends "failed")
        if text is not None and len(text) > self.settings.max_document_chars:
            text = None
        info = await self.store.create_file(filename=filename or "upload", content_type=CANONICAL[kind],
                                            size_bytes=len(data), text=text)
        await asyncio.to_thread(self._path(info.id).write_bytes, data)
        self.queue.put_nowait(info.id)
        return info

    async def delete(self, file_id: str) -> None:
        info = await self.store.get_file(file_id)
        await self._drop_documents(info.id, list(info.doc_ids))
        with contextlib.suppress(FileNotFoundError):
            self._path(file_id).unlink()
        await self.store.delete_file(file_id)

    async def _drop_documents(self, file_id: str, doc_ids: list[str]) -> None:
        if doc_ids and self.registry is not None and self.registry.exists(self.index_name):
            try:
                await self.registry.delete_documents(self.index_name, doc_ids)
            except EngineError as exc:
                log.warning("could not delete documents of %s: %s", file_id, exc.message)

    async def _run(self) -> None:
        while True:
            file_id = await self.queue.get()
            self._busy += 1
            try:
                await self.process(file_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # process() records failures itself; this is the last line of defence
                log.exception("ingestion of %s crashed", file_id)
            finally:
                self._busy -= 1

    async def process(self, file_id: str) -> None:
        try:
            info = await self.store.get_file(file_id)
        except EngineError:
            return  # deleted meanwhile
        try:
            await self._ingest(info)
        except asyncio.CancelledError:
            raise
        except ParseError as exc:
            await self._fail(file_id, str(exc))
        except EngineError as exc:
            await self._fail(file_id, f"indexing failed: {exc.message}")
        except Exception as exc:
            log.exception("ingestion of %s failed", file_id)
            await self._fail(file_id, f"unexpected error: {exc.__class__.__name__}: {exc}")

    async def _fail(self, file_id: str, reason: str) -> None:
        log.warning("file %s failed: %s", file_id, reason)
        FILES_INGESTED.labels("failed").inc()
        with contextlib.suppress(EngineError):
            await self.store.update_file(file_id, status="failed", reason=reason)
        with contextlib.suppress(FileNotFoundError):
            self._path(file_id).unlink()

    async def _ingest(self, info: FileInfo) -> None:
        await self.store.update_file(info.id, status="processing", progress=0.0, reason=None)
        try:
            data = await asyncio.to_thread(self._path(info.id).read_bytes)
        except FileNotFoundError:
            raise ParseError("the uploaded bytes are missing (the data directory was cleared?)") from None
        kind = {v: k for k, v in CANONICAL.items()}.get(info.content_type, "text")
        text, parts = await asyncio.to_thread(extract, data, kind)
        max_chars = self.settings.max_document_chars
        if len(text) > max_chars:
            raise ParseError(f"the extracted text has {len(text)} characters; the limit is {max_chars}")
        await self.store.update_file(info.id, text=text, progress=PARSE_SHARE)
        stale = [self.doc_id(info.id, i) for i in range(len(parts))] + list(info.doc_ids)
        await self._drop_documents(info.id, list(dict.fromkeys(stale)))
        done_ids: list[str] = []
        for start in range(0, len(parts), BATCH_PARTS):
            batch = parts[start:start + BATCH_PARTS]
            docs = [self._document(info, start + i, p) for i, p in enumerate(batch)]
            stored = await self.registry.add_documents(self.index_name, docs)
            done_ids += [d.get("doc_id", docs[i]["doc_id"]) for i, d in enumerate(stored)]
            progress = PARSE_SHARE + (1 - PARSE_SHARE) * (start + len(batch)) / len(parts)
            await self.store.update_file(info.id, progress=round(progress, 4), doc_ids=done_ids)
        await self.store.update_file(info.id, status="completed", progress=1.0, documents=len(done_ids), doc_ids=done_ids)
        FILES_INGESTED.labels("completed").inc()
        with contextlib.suppress(FileNotFoundError):
            self._path(info.id).unlink()

    @staticmethod
    def doc_id(file_id: str, i: int) -> str:
        return f"{file_id}-{i}"

    def _document(self, info: FileInfo, i: int, part: Part) -> dict:
        meta = {"file_id": info.id, "filename": info.filename, **part.metadata}
        return {"doc_id": self.doc_id(info.id, i), "text": part.text, "metadata": meta}
