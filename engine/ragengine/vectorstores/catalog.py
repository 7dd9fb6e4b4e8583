"""What the vector store API keeps beside the indexes: store records, attached files and their ingestion
jobs, file batches. In the session store's database (SQLite or PostgreSQL, same migrations), behind async
methods; records leave as frozen dataclasses (``objects.py``).

Ingestion jobs are the ``in_progress`` rows. A worker claims one with a conditional UPDATE (the row is
still ``in_progress`` and unleased, or its lease ran out), so on a database shared by replicas one replica
at a time works on it, and a replica that died leaves a lease that runs out. Every later update of the
worker names its claim (``lease_owner``): a file detached, re-attached or cancelled meanwhile makes the
update a no-op, and the worker stops. Lease times are the replicas' own clocks (naive UTC), unlike the
upload jobs' (``conversations/jobs.py``, the database's clock): replicas' clocks must agree within a lease
(30 s by default), which NTP gives.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragengine.conversations.models import FileBatchRow, VectorStoreFileRow, VectorStoreRow, utcnow
from ragengine.errors import Conflict, NotFound
from ragengine.vectorstores.objects import BatchRecord, StoreFileRecord, StoreRecord, StoreStats

T = TypeVar("T")


def _store(row: VectorStoreRow) -> StoreRecord:
    return StoreRecord(row.id, row.name, row.description, dict(row.meta or {}), row.expires_after_days,
                       row.created_at, row.last_active_at)


def _file(row: VectorStoreFileRow) -> StoreFileRecord:
    return StoreFileRecord(row.store_id, row.file_id, row.status, row.error_code, row.error_message,
                           row.usage_bytes or 0, dict(row.attributes or {}), dict(row.chunking or {}),
                           tuple((row.doc_ids or {}).get("ids", [])), row.batch_id, row.created_at,
                           row.lease_owner, row.attempts or 0)


def _batch(row: FileBatchRow) -> BatchRecord:
    return BatchRecord(row.id, row.store_id, tuple((row.file_ids or {}).get("ids", [])), bool(row.cancelled),
                       row.created_at)


def file_missing(store_id: str, file_id: str) -> NotFound:
    return NotFound(f"No file found with id '{file_id}' in vector store '{store_id}'.", param="file_id")


class SqlStore:
    """Transactions on the session store's database, run in worker threads (as ``SessionStore`` runs them)."""

    def __init__(self, engine: Any) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    async def _run(self, fn: Callable[[Session], T]) -> T:
        def work() -> T:
            with self._sessions.begin() as s:
                return fn(s)
        return await asyncio.to_thread(work)


class Catalog(SqlStore):

    # --- stores ------------------------------------------------------------------------------------
    async def get_store(self, store_id: str) -> StoreRecord | None:
        def fn(s: Session) -> StoreRecord | None:
            row = s.get(VectorStoreRow, store_id)
            return _store(row) if row is not None else None
        return await self._run(fn)

    async def stores(self) -> dict[str, StoreRecord]:
        def fn(s: Session) -> dict[str, StoreRecord]:
            return {r.id: _store(r) for r in s.scalars(select(VectorStoreRow))}
        return await self._run(fn)

    async def create_store(self, store_id: str, *, name: str | None = None, description: str | None = None,
                           metadata: dict | None = None, expires_after_days: int | None = None,
                           exist_ok: bool = False) -> StoreRecord:
        """A store record; ``exist_ok``: an index the API sees for the first time (a race with another
        replica doing the same is fine: the first record stays)."""
        def fn(s: Session) -> StoreRecord:
            row = VectorStoreRow(id=store_id, name=name, description=description, meta=metadata or {},
                                 expires_after_days=expires_after_days)
            s.add(row)
            s.flush()
            return _store(row)
        try:
            return await self._run(fn)
        except IntegrityError:
            existing = await self.get_store(store_id)
            if exist_ok and existing is not None:
                return existing
            raise Conflict(f"A vector store with id '{store_id}' already exists.", param="index_name") from None

    async def update_store(self, store_id: str, values: dict[str, Any]) -> StoreRecord:
        def fn(s: Session) -> StoreRecord:
            row = s.get(VectorStoreRow, store_id)
            if row is None:
                raise NotFound(f"No vector store found with id '{store_id}'.", param="vector_store_id")
            for key, value in values.items():
                setattr(row, "meta" if key == "metadata" else key, value)
            row.last_active_at = utcnow()
            return _store(row)
        return await self._run(fn)

    async def touch(self, store_ids: Iterable[str]) -> None:
        """A search or a response used these stores: ``last_active_at`` (what ``expires_after`` counts from)."""
        ids = list(store_ids)

        def fn(s: Session) -> None:
            s.execute(update(VectorStoreRow).where(VectorStoreRow.id.in_(ids)).values(last_active_at=utcnow()))
        await self._run(fn)

    async def delete_store(self, store_id: str) -> None:
        def fn(s: Session) -> None:
            for table in (VectorStoreFileRow, FileBatchRow):
                s.execute(delete(table).where(table.store_id == store_id))
            s.execute(delete(VectorStoreRow).where(VectorStoreRow.id == store_id))
        await self._run(fn)

    async def stats(self) -> dict[str, StoreStats]:
        """Per store: its files by status and their usage."""
        def fn(s: Session) -> dict[str, StoreStats]:
            out: dict[str, StoreStats] = {}
            q = (select(VectorStoreFileRow.store_id, VectorStoreFileRow.status, func.count(),
                        func.coalesce(func.sum(VectorStoreFileRow.usage_bytes), 0))
                 .group_by(VectorStoreFileRow.store_id, VectorStoreFileRow.status))
            for store_id, status, count, usage in s.execute(q):
                current = out.setdefault(store_id, StoreStats(Counter(), 0))
                current.counts[status] += count
                out[store_id] = StoreStats(current.counts, current.usage_bytes + int(usage or 0))
            return out
        return await self._run(fn)

    # --- files of a store --------------------------------------------------------------------------
    async def attach(self, store_id: str, file_id: str, *, attributes: dict, chunking: dict,
                     batch_id: str | None = None) -> StoreFileRecord:
        """Attach (or attach again: new attributes and chunking, ingested anew) as an ``in_progress`` job."""
        def fn(s: Session) -> StoreFileRecord:
            row = s.get(VectorStoreFileRow, (store_id, file_id))
            if row is None:
                row = VectorStoreFileRow(store_id=store_id, file_id=file_id, doc_ids={}, usage_bytes=0, attempts=0)
                s.add(row)
            row.status, row.error_code, row.error_message = "in_progress", None, None
            row.attributes, row.chunking, row.batch_id = attributes, chunking, batch_id
            row.lease_owner, row.lease_until, row.attempts, row.updated_at = None, None, 0, utcnow()
            s.flush()
            return _file(row)
        return await self._run(fn)

    async def get_file(self, store_id: str, file_id: str) -> StoreFileRecord:
        def fn(s: Session) -> StoreFileRecord:
            row = s.get(VectorStoreFileRow, (store_id, file_id))
            if row is None:
                raise file_missing(store_id, file_id)
            return _file(row)
        return await self._run(fn)

    async def files(self, store_id: str, *, status: str | None = None,
                    batch_id: str | None = None) -> list[StoreFileRecord]:
        """The store's files, oldest first (the API pages them)."""
        def fn(s: Session) -> list[StoreFileRecord]:
            q = select(VectorStoreFileRow).where(VectorStoreFileRow.store_id == store_id)
            if status is not None:
                q = q.where(VectorStoreFileRow.status == status)
            if batch_id is not None:
                q = q.where(VectorStoreFileRow.batch_id == batch_id)
            q = q.order_by(VectorStoreFileRow.created_at, VectorStoreFileRow.file_id)
            return [_file(r) for r in s.scalars(q)]
        return await self._run(fn)

    async def set_attributes(self, store_id: str, file_id: str, attributes: dict) -> StoreFileRecord:
        def fn(s: Session) -> StoreFileRecord:
            row = s.get(VectorStoreFileRow, (store_id, file_id))
            if row is None:
                raise file_missing(store_id, file_id)
            row.attributes, row.updated_at = attributes, utcnow()
            return _file(row)
        return await self._run(fn)

    async def detach(self, store_id: str, file_id: str) -> StoreFileRecord:
        def fn(s: Session) -> StoreFileRecord:
            row = s.get(VectorStoreFileRow, (store_id, file_id))
            if row is None:
                raise file_missing(store_id, file_id)
            record = _file(row)
            s.delete(row)
            return record
        return await self._run(fn)

    async def stores_of_file(self, file_id: str) -> list[StoreFileRecord]:
        def fn(s: Session) -> list[StoreFileRecord]:
            return [_file(r) for r in s.scalars(select(VectorStoreFileRow).where(VectorStoreFileRow.file_id == file_id))]
        return await self._run(fn)

    # --- ingestion jobs ----------------------------------------------------------------------------
    async def claim(self, lease_s: float) -> StoreFileRecord | None:
        """Take the oldest ``in_progress`` file nobody holds (or whose holder's lease ran out)."""
        def fn(s: Session) -> StoreFileRecord | None:
            now = utcnow()
            open_jobs = (VectorStoreFileRow.status == "in_progress",
                         or_(VectorStoreFileRow.lease_until.is_(None), VectorStoreFileRow.lease_until < now))
            candidates = s.execute(select(VectorStoreFileRow.store_id, VectorStoreFileRow.file_id).where(*open_jobs)
                                   .order_by(VectorStoreFileRow.updated_at).limit(8)).all()
            for store_id, file_id in candidates:
                owner = uuid.uuid4().hex
                done = s.execute(update(VectorStoreFileRow)
                                 .where(VectorStoreFileRow.store_id == store_id, VectorStoreFileRow.file_id == file_id,
                                        *open_jobs)
                                 .values(lease_owner=owner, lease_until=now + timedelta(seconds=lease_s),
                                         attempts=VectorStoreFileRow.attempts + 1))
                if done.rowcount:  # type: ignore[attr-defined]  # an UPDATE's CursorResult
                    return _file(s.get(VectorStoreFileRow, (store_id, file_id)))  # type: ignore[arg-type]
            return None
        return await self._run(fn)

    async def held(self, job: StoreFileRecord, lease_s: float | None = None, **values: Any) -> bool:
        """Update a claimed job (and renew its lease with ``lease_s``); False when the claim is no longer ours."""
        if lease_s is not None:
            values["lease_until"] = utcnow() + timedelta(seconds=lease_s)

        def fn(s: Session) -> bool:
            done = s.execute(update(VectorStoreFileRow)
                             .where(VectorStoreFileRow.store_id == job.store_id, VectorStoreFileRow.file_id == job.file_id,
                                    VectorStoreFileRow.lease_owner == job.lease_owner,
                                    VectorStoreFileRow.status == "in_progress")
                             .values(**values, updated_at=utcnow()))
            return bool(done.rowcount)  # type: ignore[attr-defined]
        return await self._run(fn)

    async def pending(self) -> int:
        def fn(s: Session) -> int:
            q = select(func.count()).select_from(VectorStoreFileRow).where(VectorStoreFileRow.status == "in_progress")
            return s.scalar(q) or 0
        return await self._run(fn)

    # --- batches -----------------------------------------------------------------------------------
    async def create_batch(self, store_id: str, file_ids: list[str]) -> BatchRecord:
        def fn(s: Session) -> BatchRecord:
            row = FileBatchRow(id=f"vsfb_{uuid.uuid4().hex}", store_id=store_id, file_ids={"ids": file_ids},
                               cancelled=False)
            s.add(row)
            s.flush()
            return _batch(row)
        return await self._run(fn)

    @staticmethod
    def _batch_row(s: Session, store_id: str, batch_id: str) -> FileBatchRow:
        row = s.get(FileBatchRow, batch_id)
        if row is None or row.store_id != store_id:
            raise NotFound(f"No file batch found with id '{batch_id}' in vector store '{store_id}'.", param="batch_id")
        return row

    async def get_batch(self, store_id: str, batch_id: str) -> BatchRecord:
        return await self._run(lambda s: _batch(self._batch_row(s, store_id, batch_id)))

    async def cancel_batch(self, store_id: str, batch_id: str) -> BatchRecord:
        """Files of the batch not yet ingested end ``cancelled`` (a worker holding one stops at its next step)."""
        def fn(s: Session) -> BatchRecord:
            row = self._batch_row(s, store_id, batch_id)
            row.cancelled = True
            s.execute(update(VectorStoreFileRow)
                      .where(VectorStoreFileRow.batch_id == batch_id, VectorStoreFileRow.status == "in_progress")
                      .values(status="cancelled", lease_owner=None, updated_at=utcnow()))
            return _batch(row)
        return await self._run(fn)
