"""Background ingestion of uploaded files: ``uploaded`` → ``processing`` → ``completed`` | ``failed``.

Uploads are parsed once, when accepted, in ``settings.parse_workers`` threads of their own, each
waiting on a bounded child process for a PDF (``ragengine.parsing``): a file over a budget is a 422
and is not stored; an unreadable one is recorded and ends ``failed`` with the reason. The extracted
text is stored at once (so a file is usable inline from that moment, even while it waits in the
queue) and its parts are handed to the job queue (``jobs.py``: the data volume and an in-process
queue on SQLite; the database, shared by every replica, on PostgreSQL).
``settings.ingestion_workers`` workers (2 by default, so one large file does not starve the rest)
take jobs and add the parts to the conversation index in batches, updating ``progress`` after each.
Any error ends the file as ``failed`` with the reason; nothing is left ``processing``: a job
interrupted by a crash is taken again (on restart, or by another replica once its lease runs out),
and a re-run first deletes the file's earlier documents (document ids are deterministic).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ragengine.conversations.file_records import LeaseLost, over_quota
from ragengine.conversations.jobs import Claim, Jobs, make_jobs
from ragengine.conversations.store import FileInfo, SessionStore
from ragengine.conversations.uploads import (
    CANONICAL,
    ParseError,
    Part,
    decode_job,
    detect_kind,
    encode_job,
    extract,
)
from ragengine.errors import EngineError, NotFound, PayloadTooLarge
from ragengine.metrics import FILES_ACCEPTED, FILES_INGESTED, INGESTION_RUNNING
from ragengine.observability import tracing
from ragengine.parsing.limits import ParseLimits
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.index.api import IndexAPI


def parse_limits(settings: EngineSettings, **overrides: Any) -> ParseLimits:
    """The bounded parser's budgets and OCR options from the engine's settings."""
    return ParseLimits(**{"cpu_s": settings.parse_cpu_s, "memory_mb": settings.parse_memory_mb,
                          "max_pages": settings.parse_max_pages, "max_chars": settings.max_document_chars,
                          "ocr_languages": settings.ocr_languages, "ocr_max_pages": settings.ocr_max_pages,
                          "ocr_s": settings.ocr_s, **overrides})


log = logging.getLogger(__name__)

PARSE_SHARE = 0.1  # progress reported once the file is parsed; the rest is indexing
BATCH_PARTS = 8
# Claims of one job before it is failed: a file that kills its replica each time (memory, a parser
# crash) must not take every replica down in turn. Rolling restarts interrupt a job once or twice.
MAX_ATTEMPTS = 5
MAX_ORIGINS = 10_000  # uploads whose ingestion joins the upload's trace, waiting at once


class IngestionWorker:
    def __init__(self, store: SessionStore, registry: IndexAPI | None, settings: EngineSettings, jobs: Jobs | None = None,
                 tracing_: tracing.Tracing | None = None) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings
        self.index_name = settings.conversation_index
        self.jobs = jobs if jobs is not None else make_jobs(store, settings)
        self.limits = parse_limits(settings)
        # Parses wait here, not in the loop's default executor that other routes use.
        self.parsers = ThreadPoolExecutor(max_workers=settings.parse_workers, thread_name_prefix="upload-parse")
        self.tracing = tracing_ or tracing.Tracing.off()
        self._tasks: list[asyncio.Task] = []
        self._busy = 0
        # file id -> the upload request's trace context, for this process's uploads; a file another replica
        # ingests (or one ingested after a restart) gets a trace of its own. Bounded: the oldest go first.
        self._origins: dict[str, Any] = {}

    async def start(self) -> None:
        await self.jobs.start()
        self._tasks = [asyncio.create_task(self._run(), name=f"conversation-ingestion-{i}")
                       for i in range(self.settings.ingestion_workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.parsers.shutdown(wait=False, cancel_futures=True)

    async def parse(self, data: bytes, kind: str) -> tuple[str, list[Part]]:
        """``extract`` in the parse pool (ParseError: unreadable; Unprocessable: over a budget)."""
        return await asyncio.get_running_loop().run_in_executor(self.parsers, extract, data, kind, self.limits)

    async def idle(self, timeout_s: float = 60.0) -> None:
        """Wait until no job is left (tests and benchmarks; shared queue: on any replica)."""
        async with asyncio.timeout(timeout_s):
            while self._busy or await self.jobs.pending():
                await asyncio.sleep(0.02)

    async def accept(self, filename: str, content_type: str | None, data: bytes, *, principal: str | None = None,
                     purpose: str | None = None, expires_at: datetime | None = None) -> FileInfo:
        """Validate (413, 415), parse once (422 over a budget), record the file as ``uploaded`` and queue its
        parts. A file whose text cannot be read is recorded ``failed`` with the reason at once, as OpenAI's
        Files API does: no job could do better."""
        if len(data) > self.settings.max_upload_bytes:
            raise PayloadTooLarge(f"The file is {len(data)} bytes; the limit is {self.settings.max_upload_bytes}.")
        quota = getattr(self.settings, "files_quota_bytes", None)
        if quota is not None and principal is not None:
            # before the parse (no CPU spent on a refused upload); checked again, atomically, when it is recorded
            held = await self.store.held_bytes(principal)
            if held + len(data) > quota:
                raise over_quota(principal, held, len(data), quota)
        kind = detect_kind(data, filename, content_type)
        try:  # now, not in the queue: the text goes inline until the file is searchable
            with tracing.stage("parse", file_kind=kind, bytes=len(data)) as span:  # in the upload's trace
                text, parts = await self.parse(data, kind)
                tracing.annotate(span, parts=len(parts), chars=len(text))
            payload = encode_job(parts)
        except ParseError as exc:
            return await self._refused(filename, kind, data, str(exc), principal, purpose, expires_at)
        info = await self.jobs.submit(filename=filename or "upload", content_type=CANONICAL[kind], text=text,
                                      data=payload, size_bytes=len(data), principal=principal, purpose=purpose,
                                      expires_at=expires_at, quota=quota)
        FILES_ACCEPTED.inc()
        if self.tracing.enabled:
            from opentelemetry import context

            self._origins[info.id] = context.get_current()
            while len(self._origins) > MAX_ORIGINS:
                self._origins.pop(next(iter(self._origins)))
            tracing.annotate(file_id=info.id, file_kind=kind, bytes=len(data))
        return info

    async def _refused(self, filename: str, kind: str, data: bytes, reason: str, principal: str | None,
                       purpose: str | None, expires_at: datetime | None) -> FileInfo:
        log.warning("file %r failed: %s", filename, reason)
        FILES_INGESTED.labels("failed").inc()
        return await self.store.create_file(filename=filename or "upload", content_type=CANONICAL[kind],
                                            size_bytes=len(data), failed=reason, principal=principal, purpose=purpose,
                                            expires_at=expires_at)

    async def delete(self, file_id: str) -> None:
        self._origins.pop(file_id, None)
        info = await self.store.get_file(file_id)
        await self._drop_documents(info.id, list(info.doc_ids))
        await self.jobs.discard(file_id)
        await self.store.delete_file(file_id)

    async def _drop_documents(self, file_id: str, doc_ids: list[str]) -> None:
        if doc_ids and self.registry is not None and self.registry.exists(self.index_name):
            try:
                await self.registry.delete_documents(self.index_name, doc_ids)
            except EngineError as exc:
                log.warning("could not delete documents of %s: %s", file_id, exc.message)

    async def _run(self) -> None:
        while True:
            claim = await self.jobs.next()
            self._busy += 1
            INGESTION_RUNNING.inc()
            token = tracing.activate(self.tracing)
            try:
                with tracing.stage("ingestion", parent=self._origins.pop(claim.file_id, None), file_id=claim.file_id,
                                   attempt=claim.attempts, index=self.index_name):
                    await self._hold(claim)
            except asyncio.CancelledError:
                raise
            except Exception:  # process() records failures itself; this is the last line of defence
                log.exception("ingestion of %s crashed", claim.file_id)
            finally:
                tracing.deactivate(token)
                INGESTION_RUNNING.dec()
                self._busy -= 1

    async def _hold(self, claim: Claim) -> None:
        """Process a claimed job, renewing its lease meanwhile (shared queue)."""
        if not self.jobs.shared:
            await self.process(claim)
            return
        beat = asyncio.create_task(self._heartbeat(claim), name=f"ingestion-lease-{claim.file_id}")
        try:
            await self.process(claim)
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _heartbeat(self, claim: Claim) -> None:
        while True:
            await asyncio.sleep(self.jobs.lease_s / 3)
            try:
                if not await self.jobs.renew(claim):
                    return  # deleted or taken over: the next guarded update stops the work
            except Exception as exc:  # the database is away: try again; the lease may still hold
                log.warning("cannot renew the lease on %s: %s", claim.file_id, exc.__class__.__name__)

    async def process(self, claim: Claim | str) -> None:
        if isinstance(claim, str):
            claim = Claim(claim)
        try:
            info = await self.store.get_file(claim.file_id)
        except EngineError:
            return  # deleted meanwhile
        if claim.attempts > MAX_ATTEMPTS:
            await self._fail(claim, f"ingestion was interrupted {MAX_ATTEMPTS} times (the engine stopped while "
                                    "ingesting it); upload the file again")
            return
        try:
            await self._ingest(info, claim)
        except asyncio.CancelledError:
            raise
        except LeaseLost:
            log.info("ingestion of %s stopped: the file was deleted or another replica took the job", claim.file_id)
        except ParseError as exc:
            await self._fail(claim, str(exc))
        except EngineError as exc:
            await self._fail(claim, f"indexing failed: {exc.message}")
        except Exception as exc:
            log.exception("ingestion of %s failed", claim.file_id)
            await self._fail(claim, f"unexpected error: {exc.__class__.__name__}: {exc}")

    async def _fail(self, claim: Claim, reason: str) -> None:
        log.warning("file %s failed: %s", claim.file_id, reason)
        tracing.annotate(status="failed", reason=reason[:300])
        FILES_INGESTED.labels("failed").inc()
        with contextlib.suppress(EngineError, LeaseLost):
            await self.store.update_file(claim.file_id, owner=claim.owner, drop_data=True, status="failed",
                                         reason=reason)
        await self.jobs.discard(claim.file_id)

    async def _ingest(self, info: FileInfo, claim: Claim) -> None:
        owner = claim.owner
        await self.store.update_file(info.id, owner=owner, status="processing", progress=0.0, reason=None)
        data = await self.jobs.data(claim)
        if data is None:
            raise ParseError("the uploaded bytes are missing (the data directory was cleared?)")
        parts = decode_job(data)  # parsed when accepted
        if parts is None:  # raw bytes queued by an engine from before parse-once: parse them now
            kind = {v: k for k, v in CANONICAL.items()}.get(info.content_type, "text")
            with tracing.stage("parse", file_kind=kind, bytes=len(data)) as span:
                try:
                    text, parts = await self.parse(data, kind)
                except EngineError as exc:  # over a budget
                    raise ParseError(exc.message) from exc
                tracing.annotate(span, parts=len(parts), chars=len(text))
            await self.store.update_file(info.id, owner=owner, text=text)
        await self.store.update_file(info.id, owner=owner, progress=PARSE_SHARE)
        ours = [self.doc_id(info.id, i) for i in range(len(parts))]
        await self._drop_documents(info.id, list(dict.fromkeys(ours + list(info.doc_ids))))
        done_ids: list[str] = []
        assert self.registry is not None, "files are ingested into the index registry"
        try:
            for start in range(0, len(parts), BATCH_PARTS):
                batch = parts[start:start + BATCH_PARTS]
                docs = [self._document(info, start + i, p) for i, p in enumerate(batch)]
                stored = await self.registry.add_documents(self.index_name, docs)
                done_ids += [d.get("doc_id", docs[i]["doc_id"]) for i, d in enumerate(stored)]
                progress = PARSE_SHARE + (1 - PARSE_SHARE) * (start + len(batch)) / len(parts)
                await self.store.update_file(info.id, owner=owner, progress=round(progress, 4), doc_ids=done_ids)
            await self.store.update_file(info.id, owner=owner, drop_data=True, status="completed", progress=1.0,
                                         documents=len(done_ids), doc_ids=done_ids)
        except LeaseLost:
            if await self._deleted(info.id):  # deleted while being ingested: its chunks go too
                await self._drop_documents(info.id, ours)
            raise
        FILES_INGESTED.labels("completed").inc()
        tracing.annotate(status="completed", documents=len(done_ids))
        await self.jobs.discard(info.id)

    async def _deleted(self, file_id: str) -> bool:
        try:
            await self.store.get_file(file_id)
        except NotFound:
            return True
        return False

    @staticmethod
    def doc_id(file_id: str, i: int) -> str:
        return f"{file_id}-{i}"

    def _document(self, info: FileInfo, i: int, part: Part) -> dict:
        meta = {"file_id": info.id, "filename": info.filename, **part.metadata}
        return {"doc_id": self.doc_id(info.id, i), "text": part.text, "metadata": meta}
