"""The session store: sessions, threads, messages and uploaded files in SQL, behind async methods.

A synchronous SQLAlchemy engine run in the store's own bounded thread pool: the same code path for
SQLite and PostgreSQL (psycopg 3), no async driver needed, and a slow database never blocks the
event loop. Records leave the store as frozen dataclasses (``records.py``).

Ownership (access control): a session and an upload record the principal that created it (``principal``,
``access.rules.Principal.id``); ``owned_by`` restricts a lookup or a list to one principal's rows (None:
everyone's, for admins and the engine itself). A row of another principal answers exactly like a missing one.

Threads: every session has a ``main`` thread. A branch is created from any message; its history is
its parent thread's history up to and including that message, followed by its own messages.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import and_, create_engine, delete, event, func, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, defer, sessionmaker

from ragengine.conversations.models import (
    MAIN_THREAD,
    FileBlobRow,
    FileRow,
    MessageRow,
    SessionFileRow,
    SessionRow,
    ThreadRow,
    VectorStoreFileRow,
    new_id,
    utcnow,
)
from ragengine.conversations.records import (  # noqa: F401  (re-exported for callers)
    FileInfo,
    MessageInfo,
    SessionInfo,
    ThreadInfo,
    _file,
    _message,
    _session,
    _thread,
    iso,
)
from ragengine.errors import BadRequest, Conflict, NotFound

T = TypeVar("T")
MAX_THREAD_DEPTH = 64
ACTIVE_FILE_STATUSES = ("uploaded", "processing")  # an ingestion job still to do (or being done)


class LeaseLost(Exception):
    """An ingestion job's update found its claim gone: the file was deleted, or its lease ran out and
    another replica took the job. The holder stops; what it wrote is the new holder's to replace."""


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record) -> None:  # cascades and concurrent readers need these on SQLite
            cur = conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            # FULL: the WAL is fsync'ed at every commit, so an acknowledged message survives a power loss
            # (NORMAL syncs only at checkpoints: kill -9 loses nothing, a power cut loses recent commits).
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

        return engine
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]  # psycopg 3, not the absent psycopg2
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


class SessionStore:
    def __init__(self, url: str, *, threads: int = 8) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Its own bounded executor, not the loop's default one: six slow uploads once held every default
        # thread and GET /v1/sessions waited 30 s behind them (issue 22).
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="session-store")

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def create_tables(self) -> None:
        """Create or upgrade the schema (alembic migrations; see ``schema.py``)."""
        from ragengine.conversations.schema import upgrade

        upgrade(self.engine)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.engine.dispose()

    async def _run(self, fn: Callable[[Session], T]) -> T:
        def work() -> T:
            with self._sessions.begin() as s:
                return fn(s)
        context = contextvars.copy_context()  # as asyncio.to_thread does
        return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, work)

    # --- sessions ----------------------------------------------------------------------------------
    async def create_session(self, *, user_id: str | None = None, title: str | None = None,
                             index_name: str | None = None, metadata: dict | None = None,
                             principal: str | None = None) -> SessionInfo:
        def fn(s: Session) -> SessionInfo:
            row = SessionRow(id=new_id("sess"), user_id=user_id, title=title, index_name=index_name,
                             meta=metadata or {}, owner=principal)
            s.add(row)
            s.flush()
            s.add(ThreadRow(session_id=row.id, id=MAIN_THREAD, title="main"))
            return _session(row)
        return await self._run(fn)

    def _get_session(self, s: Session, session_id: str) -> SessionRow:
        row = s.get(SessionRow, session_id)
        if row is None:
            raise NotFound(f"No such session: '{session_id}'.")
        return row

    async def get_session(self, session_id: str) -> SessionInfo:
        def fn(s: Session) -> SessionInfo:
            row = self._get_session(s, session_id)
            count = s.scalar(select(func.count()).select_from(MessageRow).where(MessageRow.session_id == session_id))
            return _session(row, count or 0)
        return await self._run(fn)

    async def session_access(self, session_id: str) -> tuple[str | None, str | None] | None:
        """``(owner, index_name)`` of a session, None when there is none: what access control checks."""
        def fn(s: Session) -> tuple[str | None, str | None] | None:
            row = s.execute(select(SessionRow.owner, SessionRow.index_name).where(SessionRow.id == session_id)).first()
            return (row[0], row[1]) if row is not None else None
        return await self._run(fn)

    async def list_sessions(self, *, user_id: str | None = None, limit: int = 100, offset: int = 0,
                            owned_by: str | None = None,
                            index_visible: Callable[[str | None], bool] | None = None) -> list[SessionInfo]:
        """Newest first. ``index_visible``: only sessions whose index passes (applied before the page is cut,
        so pages stay full)."""
        def fn(s: Session) -> list[SessionInfo]:
            q = select(SessionRow).order_by(SessionRow.updated_at.desc(), SessionRow.id)
            if user_id is not None:
                q = q.where(SessionRow.user_id == user_id)
            if owned_by is not None:
                q = q.where(SessionRow.owner == owned_by)
            if index_visible is None:
                return [_session(r) for r in s.scalars(q.limit(limit).offset(offset))]
            rows = (r for r in s.scalars(q.execution_options(yield_per=500)) if index_visible(r.index_name))
            return [_session(r) for r in itertools.islice(rows, offset, offset + limit)]
        return await self._run(fn)

    async def delete_session(self, session_id: str) -> None:
        def fn(s: Session) -> None:
            self._get_session(s, session_id)
            # Explicit child deletes: correct even where the database ignores ON DELETE CASCADE.
            for table in (MessageRow, ThreadRow, SessionFileRow):
                s.execute(delete(table).where(table.session_id == session_id))
            s.execute(delete(SessionRow).where(SessionRow.id == session_id))
        await self._run(fn)

    async def delete_expired(self, ttl_s: int) -> list[str]:
        """Delete sessions idle for longer than ``ttl_s``; returns their ids."""
        cutoff = utcnow() - timedelta(seconds=ttl_s)

        def fn(s: Session) -> list[str]:
            ids = list(s.scalars(select(SessionRow.id).where(SessionRow.updated_at < cutoff)))
            for i in range(0, len(ids), 500):
                batch = ids[i:i + 500]
                for table in (MessageRow, ThreadRow, SessionFileRow):
                    s.execute(delete(table).where(table.session_id.in_(batch)))
                s.execute(delete(SessionRow).where(SessionRow.id.in_(batch)))
            return ids
        return await self._run(fn)

    # --- threads and messages ----------------------------------------------------------------------
    async def add_message(self, session_id: str, thread_id: str, role: str, content: str,
                          metadata: dict | None = None) -> MessageInfo:
        def fn(s: Session) -> MessageInfo:
            session = self._get_session(s, session_id)
            if s.get(ThreadRow, (session_id, thread_id)) is None:
                raise NotFound(f"No such thread: '{thread_id}' in session '{session_id}'.")
            row = MessageRow(id=new_id("msg"), session_id=session_id, thread_id=thread_id, role=role,
                             content=content, meta=metadata or {})
            s.add(row)
            session.updated_at = utcnow()
            s.flush()
            return _message(row)
        return await self._run(fn)

    async def create_thread(self, session_id: str, parent_message_id: str, *, title: str | None = None,
                            thread_id: str | None = None) -> ThreadInfo:
        """A thread branching after ``parent_message_id``; ``thread_id`` names it (409 if taken), else generated."""
        def fn(s: Session) -> ThreadInfo:
            self._get_session(s, session_id)
            parent = s.scalar(select(MessageRow).where(MessageRow.id == parent_message_id))
            if parent is None or parent.session_id != session_id:
                raise NotFound(f"No such message: '{parent_message_id}' in session '{session_id}'.")
            if thread_id is not None and s.get(ThreadRow, (session_id, thread_id)) is not None:
                raise Conflict(f"Thread '{thread_id}' already exists in session '{session_id}'.", param="thread_id")
            row = ThreadRow(session_id=session_id, id=thread_id or new_id("thr"), parent_thread_id=parent.thread_id,
                            parent_message_id=parent.id, title=title)
            s.add(row)
            s.flush()
            return _thread(row)
        return await self._run(fn)

    async def list_threads(self, session_id: str) -> list[ThreadInfo]:
        def fn(s: Session) -> list[ThreadInfo]:
            self._get_session(s, session_id)
            counts = dict(s.execute(
                select(MessageRow.thread_id, func.count()).where(MessageRow.session_id == session_id)
                .group_by(MessageRow.thread_id)
            ).all())
            rows = s.scalars(select(ThreadRow).where(ThreadRow.session_id == session_id).order_by(ThreadRow.created_at))
            return [_thread(r, counts.get(r.id, 0)) for r in rows]
        return await self._run(fn)

    async def get_thread(self, session_id: str, thread_id: str) -> ThreadInfo:
        def fn(s: Session) -> ThreadInfo:
            self._get_session(s, session_id)
            row = s.get(ThreadRow, (session_id, thread_id))
            if row is None:
                raise NotFound(f"No such thread: '{thread_id}' in session '{session_id}'.")
            return _thread(row)
        return await self._run(fn)

    async def history(self, session_id: str, thread_id: str = MAIN_THREAD, *, last: int | None = None) -> list[MessageInfo]:
        """The thread's messages in order, inherited ones first; ``last`` keeps only the newest few
        (and reads only those: long sessions do not cost a full scan per message)."""
        def fn(s: Session) -> list[MessageInfo]:
            self._get_session(s, session_id)
            return [_message(r) for r in self._thread_rows(s, session_id, thread_id, None, last, 0)]
        return await self._run(fn)

    def _thread_rows(self, s: Session, session_id: str, thread_id: str, upto_seq: int | None, limit: int | None,
                     depth: int) -> list[MessageRow]:
        thread = s.get(ThreadRow, (session_id, thread_id))
        if thread is None:
            raise NotFound(f"No such thread: '{thread_id}' in session '{session_id}'.")
        if depth > MAX_THREAD_DEPTH:
            raise BadRequest(f"Thread '{thread_id}' is nested deeper than {MAX_THREAD_DEPTH} branches.")
        q = select(MessageRow).where(MessageRow.session_id == session_id, MessageRow.thread_id == thread_id)
        if upto_seq is not None:
            q = q.where(MessageRow.seq <= upto_seq)
        if limit:
            own = list(s.scalars(q.order_by(MessageRow.seq.desc()).limit(limit)))[::-1]
            if len(own) >= limit:
                return own
        else:
            own = list(s.scalars(q.order_by(MessageRow.seq)))
        if not thread.parent_message_id:
            return own
        parent = s.scalar(select(MessageRow).where(MessageRow.id == thread.parent_message_id))
        if parent is None:  # the branch point is gone (cannot happen without manual edits): own only
            return own
        rest = limit - len(own) if limit else None
        return self._thread_rows(s, session_id, parent.thread_id, parent.seq, rest, depth + 1) + own

    # --- files ------------------------------------------------------------------------------------
    async def create_file(self, *, filename: str, content_type: str, size_bytes: int, text: str | None = None,
                          data: bytes | None = None, principal: str | None = None, purpose: str | None = None,
                          expires_at: datetime | None = None, failed: str | None = None) -> FileInfo:
        """A new ``uploaded`` file; with ``data``, its bytes are stored in the same transaction, so no
        replica can take the job before the bytes are there. ``failed``: the reason it cannot be ingested,
        known at once (the file is recorded ``failed``, with no job)."""
        def fn(s: Session) -> FileInfo:
            row = FileRow(id=new_id("file"), filename=filename, content_type=content_type, size_bytes=size_bytes,
                          status="failed" if failed else "uploaded", progress=0.0, text=text, doc_ids={},
                          reason=failed, owner=principal, purpose=purpose, expires_at=expires_at)
            s.add(row)
            s.flush()
            if data is not None:
                s.add(FileBlobRow(file_id=row.id, data=data))
            return _file(row)
        return await self._run(fn)

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

    async def attach_files(self, session_id: str, file_ids: list[str], *, owned_by: str | None = None) -> None:
        """Attach uploads to a session; with ``owned_by``, only that principal's (another's is "no such file")."""
        def fn(s: Session) -> None:
            self._get_session(s, session_id)
            have = set(s.scalars(select(SessionFileRow.file_id).where(SessionFileRow.session_id == session_id)))
            for fid in dict.fromkeys(file_ids):
                row = s.get(FileRow, fid)
                if row is None or (owned_by is not None and row.owner != owned_by):
                    raise NotFound(f"No such file: '{fid}'.")
                if fid not in have:
                    s.add(SessionFileRow(session_id=session_id, file_id=fid))
        await self._run(fn)

    async def detach_file(self, session_id: str, file_id: str) -> None:
        def fn(s: Session) -> None:
            self._get_session(s, session_id)
            gone = s.execute(delete(SessionFileRow).where(SessionFileRow.session_id == session_id,
                                                          SessionFileRow.file_id == file_id))
            if not gone.rowcount:  # type: ignore[attr-defined]  # a DELETE's result is a CursorResult
                raise NotFound(f"File '{file_id}' is not attached to session '{session_id}'.")
        await self._run(fn)

    async def session_files(self, session_id: str) -> list[FileInfo]:
        def fn(s: Session) -> list[FileInfo]:
            self._get_session(s, session_id)
            q = (select(FileRow).join(SessionFileRow, SessionFileRow.file_id == FileRow.id)
                 .where(SessionFileRow.session_id == session_id).order_by(SessionFileRow.attached_at, FileRow.id))
            return [_file(r) for r in s.scalars(q)]
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
