"""The session store: sessions, threads, messages and uploaded files in SQL, behind async methods.

The database and its thread pool are ``database.py``; files and their ingestion jobs are
``file_records.py``; this module adds sessions, threads, messages and the files attached to a
session. Records leave the store as frozen dataclasses (``records.py``).

Ownership (access control): a session and an upload record the principal that created it (``principal``,
``access.rules.Principal.id``); ``owned_by`` restricts a lookup or a list to one principal's rows (None:
everyone's, for admins and the engine itself). A row of another principal answers exactly like a missing one.

Threads: every session has a ``main`` thread. A branch is created from any message; its history is
its parent thread's history up to and including that message, followed by its own messages.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from ragengine.conversations.file_records import FileRecords
from ragengine.conversations.models import (
    MAIN_THREAD,
    FileRow,
    MessageRow,
    SessionFileRow,
    SessionRow,
    ThreadRow,
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

MAX_THREAD_DEPTH = 64


class SessionStore(FileRecords):
    """The whole store: what ``FileRecords`` and ``SqlStore`` give, and sessions, threads and messages."""

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
            return _thread(self._branch(s, session_id, parent_message_id, title, thread_id))
        return await self._run(fn)

    def _branch(self, s: Session, session_id: str, parent_message_id: str, title: str | None,
                thread_id: str | None) -> ThreadRow:
        parent = s.scalar(select(MessageRow).where(MessageRow.id == parent_message_id))
        if parent is None or parent.session_id != session_id:
            raise NotFound(f"No such message: '{parent_message_id}' in session '{session_id}'.")
        if thread_id is not None and s.get(ThreadRow, (session_id, thread_id)) is not None:
            raise Conflict(f"Thread '{thread_id}' already exists in session '{session_id}'.", param="thread_id")
        depth, above = 0, s.get(ThreadRow, (session_id, parent.thread_id))
        while above is not None and above.parent_thread_id:
            depth, above = depth + 1, s.get(ThreadRow, (session_id, above.parent_thread_id))
        if depth >= MAX_THREAD_DEPTH:  # its history could not be read
            raise BadRequest(f"Thread '{parent.thread_id}' is nested {depth} branches deep; a branch of it would be "
                             f"deeper than {MAX_THREAD_DEPTH}.", param="parent_message_id")
        row = ThreadRow(session_id=session_id, id=thread_id or new_id("thr"), parent_thread_id=parent.thread_id,
                        parent_message_id=parent.id, title=title)
        s.add(row)
        s.flush()
        return row

    async def open_turn(self, session_id: str, thread_id: str, *, parent_message_id: str | None = None,
                        new_thread_id: str | None = None, file_ids: list[str] | None = None,
                        owned_by: str | None = None) -> str:
        """What a message writes before its answer, in one transaction, so a refusal (a missing thread, parent
        or file) leaves nothing behind: a branch from ``parent_message_id`` (named ``new_thread_id``, else
        generated) or the check that ``thread_id`` exists, then ``file_ids`` attached. -> the thread's id."""
        def fn(s: Session) -> str:
            self._get_session(s, session_id)
            if parent_message_id is not None:
                thread_id_ = self._branch(s, session_id, parent_message_id, None, new_thread_id).id
            elif s.get(ThreadRow, (session_id, thread_id)) is None:
                raise NotFound(f"No such thread: '{thread_id}' in session '{session_id}'.")
            else:
                thread_id_ = thread_id
            self._attach(s, session_id, file_ids or [], owned_by)
            return thread_id_
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

    # --- a session's files ------------------------------------------------------------------------
    async def attach_files(self, session_id: str, file_ids: list[str], *, owned_by: str | None = None) -> None:
        """Attach uploads to a session; with ``owned_by``, only that principal's (another's is "no such file")."""
        def fn(s: Session) -> None:
            self._get_session(s, session_id)
            self._attach(s, session_id, file_ids, owned_by)
        await self._run(fn)

    def _attach(self, s: Session, session_id: str, file_ids: list[str], owned_by: str | None) -> None:
        have = set(s.scalars(select(SessionFileRow.file_id).where(SessionFileRow.session_id == session_id)))
        for fid in dict.fromkeys(file_ids):
            row = s.get(FileRow, fid)
            if row is None or (owned_by is not None and row.owner != owned_by):
                raise NotFound(f"No such file: '{fid}'.")
            if fid not in have:
                s.add(SessionFileRow(session_id=session_id, file_id=fid))

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
