"""Records that leave the session store: frozen dataclasses, never live ORM objects (nothing can lazy
load after its database session closed), with ``to_dict()`` for the API."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime

from ragengine.conversations.models import FileRow, MessageRow, SessionRow, ThreadRow


def iso(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds") + "Z"


@dataclass(frozen=True)
class SessionInfo:
    id: str
    user_id: str | None
    title: str | None
    index_name: str | None
    metadata: dict
    created_at: str
    updated_at: str
    message_count: int = 0
    owner: str | None = None  # the principal that created it (access control)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ThreadInfo:
    id: str
    session_id: str
    parent_thread_id: str | None
    parent_message_id: str | None
    title: str | None
    created_at: str
    message_count: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MessageInfo:
    id: str
    session_id: str
    thread_id: str
    role: str
    content: str
    metadata: dict
    created_at: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FileInfo:
    id: str
    filename: str
    content_type: str
    size_bytes: int
    status: str
    progress: float
    reason: str | None
    documents: int
    created_at: str
    updated_at: str
    text: str | None = field(default=None, repr=False)
    doc_ids: tuple[str, ...] = ()
    owner: str | None = None  # the principal that uploaded it (access control)
    purpose: str | None = None  # as the client gave it on /v1/files; None: none given
    expires_at: str | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("text")
        out.pop("doc_ids")
        return out


def _session(row: SessionRow, count: int = 0) -> SessionInfo:
    return SessionInfo(row.id, row.user_id, row.title, row.index_name, dict(row.meta or {}), iso(row.created_at),
                       iso(row.updated_at), count, row.owner)


def _thread(row: ThreadRow, count: int = 0) -> ThreadInfo:
    return ThreadInfo(row.id, row.session_id, row.parent_thread_id, row.parent_message_id, row.title,
                      iso(row.created_at), count)


def _message(row: MessageRow) -> MessageInfo:
    return MessageInfo(row.id, row.session_id, row.thread_id, row.role, row.content, dict(row.meta or {}),
                       iso(row.created_at))


def _file(row: FileRow, *, with_text: bool = True) -> FileInfo:
    """``with_text=False``: for listings, whose query defers the (large) text column."""
    ids = tuple((row.doc_ids or {}).get("ids", []))
    return FileInfo(row.id, row.filename, row.content_type, row.size_bytes, row.status, row.progress, row.reason,
                    row.documents, iso(row.created_at), iso(row.updated_at), row.text if with_text else None, ids,
                    row.owner, row.purpose, iso(row.expires_at) if row.expires_at else None)
