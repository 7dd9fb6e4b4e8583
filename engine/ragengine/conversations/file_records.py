"""Uploaded files and their ingestion jobs in the session store's database.

A file's row carries its job: ``uploaded`` / ``processing`` while ingestion is to do, a lease
(``lease_owner``, ``lease_expires_at``) while a replica holds it (``jobs.py``), its bytes in a row of
their own until the job is over. ``owned_by`` restricts a lookup or a list to one principal's files.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Session, defer

from ragengine.conversations.database import SqlStore
from ragengine.conversations.models import FileBlobRow, FileRow, SessionFileRow, VectorStoreFileRow, new_id, utcnow
from ragengine.conversations.records import FileInfo, _file
from ragengine.errors import BadRequest, NotFound, PayloadTooLarge

ACTIVE_FILE_STATUSES = ("uploaded", "processing")  # an ingestion job still to do (or being done)


class LeaseLost(Exception):
    """An ingestion job's update found its claim gone: the file was deleted, or its lease ran out and
    another replica took the job. The holder stops; what it wrote is the new holder's to replace."""


def over_quota(principal: str, held: int, size: int, quota: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"'{principal}' holds {held} bytes of files; this upload of {size} bytes would pass its "
                           f"quota of {quota} bytes. Delete files (DELETE /v1/files/{{file_id}}) to make room.")


class FileRecords(SqlStore):
    """Uploads (OpenAI's files, session attachments' records) and the ingestion jobs replicas share."""

    # --- files ------------------------------------------------------------------------------------
    async def create_file(self, *, filename: str, content_type: str, size_bytes: int, text: str | None = None,
                          data: bytes | None = None, principal: str | None = None, purpose: str | None = None,
                          expires_at: datetime | None = None, failed: str | None = None,
                          quota: int | None = None) -> FileInfo:
        """A new ``uploaded`` file; with ``data``, its bytes are stored in the same transaction, so no
        replica can take the job before the bytes are there. ``failed``: the reason it cannot be ingested,
        known at once (the file is recorded ``failed``, with no job). ``quota``: the bytes of files the
        principal may hold, this one included (413 beyond, nothing stored), checked in the same transaction."""
        limited = quota is not None and principal is not None and not failed

        def fn(s: Session) -> FileInfo:
            if limited and self.dialect == "postgresql":  # one upload of a principal at a time, on every replica
                s.execute(sql_text("SELECT pg_advisory_xact_lock(hashtextextended(:p, 41))"), {"p": principal})
            row = FileRow(id=new_id("file"), filename=filename, content_type=content_type, size_bytes=size_bytes,
                          status="failed" if failed else "uploaded", progress=0.0, text=text, doc_ids={},
                          reason=failed, owner=principal, purpose=purpose, expires_at=expires_at)
            s.add(row)
            s.flush()  # on SQLite the insert takes the database's write lock: the sum below sees every upload
            if limited:
                held = self._held(s, principal or "")
                if held > (quota or 0):  # this one counted: raising rolls it back, nothing is stored
                    raise over_quota(principal or "", held - size_bytes, size_bytes, quota or 0)
            if data is not None:
                s.add(FileBlobRow(file_id=row.id, data=data))
            return _file(row)
        return await self._run(fn)

    @staticmethod
    def _held(s: Session, principal: str) -> int:
        return int(s.execute(select(func.coalesce(func.sum(FileRow.size_bytes), 0))
                             .where(FileRow.owner == principal, FileRow.status != "failed")).scalar_one())

    async def held_bytes(self, principal: str) -> int:
        """The bytes of the files ``principal`` holds (failed ones not counted): what its quota counts."""
        return await self._run(lambda s: self._held(s, principal))

    async def get_file(self, file_id: str, *, owned_by: str | None = None) -> FileInfo:
        def fn(s: Session) -> FileInfo:
            row = s.get(FileRow, file_id)
            if row is None or (owned_by is not None and row.owner != owned_by):
                raise NotFound(f"No such file: '{file_id}'.")
            return _file(row)
        return await self._run(fn)

    async def file_owner(self, file_id: str) -> tuple[bool, str | None]:
        """``(exists, owner)`` of an upload: what access control checks."""
        def fn(s: Session) -> tuple[bool, str | None]:
            row = s.execute(select(FileRow.owner).where(FileRow.id == file_id)).first()
            return (row is not None, row[0] if row is not None else None)
        return await self._run(fn)

    async def list_files(self, *, status: str | None = None, limit: int = 1000,
                         owned_by: str | None = None) -> list[FileInfo]:
        def fn(s: Session) -> list[FileInfo]:
            q = select(FileRow).order_by(FileRow.created_at)
            if status is not None:
                q = q.where(FileRow.status == status)
            if owned_by is not None:
                q = q.where(FileRow.owner == owned_by)
            return [_file(r) for r in s.scalars(q.limit(limit))]
        return await self._run(fn)

    async def page_files(self, *, limit: int, order: str = "desc", after: str | None = None,
                         before: str | None = None, purpose: str | None = None, status: str | None = None,
                         owned_by: str | None = None) -> tuple[list[FileInfo], bool]:
        """OpenAI's cursor page over files by (created_at, id): ``after`` / ``before`` are file ids (the
        items past / ahead of them in ``order``), and whether more lie beyond the page. Texts are not read."""
        def fn(s: Session) -> tuple[list[FileInfo], bool]:
            desc = order == "desc"
            q = select(FileRow).options(defer(FileRow.text))
            if owned_by is not None:
                q = q.where(FileRow.owner == owned_by)
            if purpose is not None:
                q = q.where(FileRow.purpose == purpose)
            if status is not None:
                q = q.where(FileRow.status == status)
            for cursor, forward in ((after, True), (before, False)):
                if cursor is None:
                    continue
                mark = s.get(FileRow, cursor)
                if mark is None or (owned_by is not None and mark.owner != owned_by):
                    raise BadRequest(f"No such file: '{cursor}' (the {'after' if forward else 'before'} cursor).",
                                     param="after" if forward else "before")
                later = forward != desc  # the side of the cursor that comes next in the listing
                q = q.where(_beyond(mark, later))
            ascending = desc == (before is not None)  # walking back from `before` reads the other way
            keys = (FileRow.created_at, FileRow.id) if ascending else (FileRow.created_at.desc(), FileRow.id.desc())
            rows = list(s.scalars(q.order_by(*keys).limit(limit + 1)))
            more = len(rows) > limit
            rows = rows[:limit]
            if before is not None:
                rows.reverse()
            return [_file(r, with_text=False) for r in rows], more
        return await self._run(fn)

    async def expired_files(self) -> list[FileInfo]:
        """Files past their ``expires_at`` (OpenAI's ``expires_after``)."""
        def fn(s: Session) -> list[FileInfo]:
            q = select(FileRow).options(defer(FileRow.text)).where(FileRow.expires_at < utcnow())
            return [_file(r, with_text=False) for r in s.scalars(q)]
        return await self._run(fn)

    async def update_file(self, file_id: str, *, owner: str | None = None, drop_data: bool = False,
                          **values: Any) -> None:
        """Set the file's fields. ``owner``: only while that claim holds the job (else ``LeaseLost``);
        ``drop_data``: its stored bytes go in the same transaction (the job is over)."""
        allowed = {"status", "progress", "reason", "text", "documents", "doc_ids"}
        if set(values) - allowed:
            raise ValueError(f"cannot update {sorted(set(values) - allowed)}")
        if "doc_ids" in values:
            values["doc_ids"] = {"ids": list(values["doc_ids"])}

        def fn(s: Session) -> None:
            q = update(FileRow).where(FileRow.id == file_id)
            if owner is not None:
                q = q.where(FileRow.lease_owner == owner)
            done = s.execute(q.values(**values, updated_at=utcnow()))
            if owner is not None and not done.rowcount:  # type: ignore[attr-defined]  # an UPDATE's CursorResult
                raise LeaseLost(file_id)
            if drop_data:
                s.execute(delete(FileBlobRow).where(FileBlobRow.file_id == file_id))
        await self._run(fn)

    async def delete_file(self, file_id: str) -> None:
        def fn(s: Session) -> None:
            s.execute(delete(SessionFileRow).where(SessionFileRow.file_id == file_id))
            s.execute(delete(FileBlobRow).where(FileBlobRow.file_id == file_id))
            s.execute(delete(FileRow).where(FileRow.id == file_id))
        await self._run(fn)

    # --- ingestion jobs shared by replicas (PostgreSQL; see jobs.py) -------------------------------
    async def file_data(self, file_id: str) -> bytes | None:
        def fn(s: Session) -> bytes | None:
            return s.scalar(select(FileBlobRow.data).where(FileBlobRow.file_id == file_id))
        return await self._run(fn)

    async def claim_job(self, owner: str, lease_s: float) -> tuple[str, int] | None:
        """Take the oldest file whose ingestion is to do and whose lease (if any) ran out: ``(id, attempts)``.

        ``FOR UPDATE SKIP LOCKED``: replicas claiming at once each get a different row, without waiting
        on each other; the lease then keeps the job theirs after this short transaction commits. Times
        are the database's clock, so replicas' clocks never need to agree."""
        now = func.timezone("UTC", func.now())
        lease = timedelta(seconds=lease_s)

        def fn(s: Session) -> tuple[str, int] | None:
            oldest = (select(FileRow.id)
                      .where(FileRow.status.in_(ACTIVE_FILE_STATUSES),
                             or_(FileRow.lease_expires_at.is_(None), FileRow.lease_expires_at < now))
                      .order_by(FileRow.created_at, FileRow.id).limit(1)
                      .with_for_update(skip_locked=True).scalar_subquery())
            row = s.execute(update(FileRow).where(FileRow.id == oldest)
                            .values(lease_owner=owner, lease_expires_at=now + lease, attempts=FileRow.attempts + 1)
                            .returning(FileRow.id, FileRow.attempts)).first()
            return (row[0], row[1]) if row else None
        return await self._run(fn)

    async def renew_lease(self, file_id: str, owner: str, lease_s: float) -> bool:
        """Extend the claim's lease; False when it is no longer this claim's (deleted, or taken over)."""
        now = func.timezone("UTC", func.now())

        def fn(s: Session) -> bool:
            done = s.execute(update(FileRow).where(FileRow.id == file_id, FileRow.lease_owner == owner)
                             .values(lease_expires_at=now + timedelta(seconds=lease_s)))
            return bool(done.rowcount)  # type: ignore[attr-defined]
        return await self._run(fn)

    async def count_active_files(self) -> int:
        def fn(s: Session) -> int:
            q = select(func.count()).select_from(FileRow).where(FileRow.status.in_(ACTIVE_FILE_STATUSES))
            return s.scalar(q) or 0
        return await self._run(fn)

    async def orphan_files(self, ttl_s: int) -> list[FileInfo]:
        """Session uploads attached to no session and untouched for ``ttl_s``: candidates for clean-up.
        Files uploaded with an OpenAI ``purpose`` stay until deleted or expired, as on OpenAI, and so do
        files in a vector store."""
        cutoff = utcnow() - timedelta(seconds=ttl_s)

        def fn(s: Session) -> list[FileInfo]:
            attached = select(SessionFileRow.file_id)
            in_stores = select(VectorStoreFileRow.file_id)
            q = select(FileRow).where(FileRow.updated_at < cutoff, FileRow.id.not_in(attached),
                                      FileRow.id.not_in(in_stores), FileRow.purpose.is_(None))
            return [_file(r) for r in s.scalars(q)]
        return await self._run(fn)


def _beyond(mark: FileRow, later: bool) -> Any:
    """Rows after (``later``) or before ``mark`` in (created_at, id) order: a keyset condition."""
    if later:
        return or_(FileRow.created_at > mark.created_at, and_(FileRow.created_at == mark.created_at, FileRow.id > mark.id))
    return or_(FileRow.created_at < mark.created_at, and_(FileRow.created_at == mark.created_at, FileRow.id < mark.id))
