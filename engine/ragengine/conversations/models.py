"""SQLAlchemy 2.0 tables for sessions, threads, messages and uploaded files.

One schema for SQLite (the default file in ``data_dir``) and PostgreSQL (psycopg 3). Portable types
only: string ids (uuid4 hex), ``JSON`` for metadata, timestamps as naive UTC.
Messages carry an integer ``seq`` primary key so "in the order they were written" is one index scan on
both databases, whatever the clock resolution.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ragengine.protocol.conversations import MAIN_THREAD  # noqa: F401  (re-exported for the store)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def utcnow() -> datetime:
    # Naive UTC: SQLite has no time zones, so aware values would compare differently per database.
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, datetime: DateTime()}


class SessionRow(Base):
    __tablename__ = "conv_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(String(256), index=True)
    title: Mapped[str | None] = mapped_column(String(512))
    index_name: Mapped[str | None] = mapped_column(String(256))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    # The principal that created it (access.rules.Principal.id, at most "serviceaccount:" + 63 + "/" + 253 = 332
    # characters); NULL: made before access control, admins only.
    owner: Mapped[str | None] = mapped_column(String(400), index=True)


class ThreadRow(Base):
    __tablename__ = "conv_threads"

    # The id is unique per session only ("main" exists in every session), hence the composite key.
    session_id: Mapped[str] = mapped_column(ForeignKey("conv_sessions.id", ondelete="CASCADE"), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    parent_thread_id: Mapped[str | None] = mapped_column(String(64))
    parent_message_id: Mapped[str | None] = mapped_column(String(64))
    title: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MessageRow(Base):
    __tablename__ = "conv_messages"
    __table_args__ = (Index("ix_conv_messages_thread", "session_id", "thread_id", "seq"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("conv_sessions.id", ondelete="CASCADE"))
    thread_id: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(32))
    content: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class FileRow(Base):
    __tablename__ = "conv_files"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    filename: Mapped[str] = mapped_column(String(1024))
    content_type: Mapped[str] = mapped_column(String(128))
    size_bytes: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(32), index=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    reason: Mapped[str | None] = mapped_column(Text)
    # Extracted text: sent inline to the LLM while ingestion is not completed.
    text: Mapped[str | None] = mapped_column(Text)
    documents: Mapped[int] = mapped_column(Integer, default=0)
    doc_ids: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The ingestion job on PostgreSQL (``jobs.py``): which claim holds it, until when (the database's
    # clock, UTC), and how many claims it has had. Unused on SQLite, where one process owns the queue.
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    owner: Mapped[str | None] = mapped_column(String(400), index=True)  # as SessionRow.owner
    # OpenAI's file fields (``/v1/files``): the purpose a client gave (None: an upload from before, or
    # one that named none; only those are cleaned up by the session TTL) and when the file expires.
    purpose: Mapped[str | None] = mapped_column(String(32))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime)


class FileBlobRow(Base):
    """An uploaded file's bytes until its ingestion ends, when the sessions live in PostgreSQL: every
    replica can then ingest a file that another one accepted (SQLite keeps them in ``<data_dir>/uploads``)."""

    __tablename__ = "conv_file_blobs"

    file_id: Mapped[str] = mapped_column(ForeignKey("conv_files.id", ondelete="CASCADE"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class SessionFileRow(Base):
    __tablename__ = "conv_session_files"

    session_id: Mapped[str] = mapped_column(ForeignKey("conv_sessions.id", ondelete="CASCADE"), primary_key=True)
    file_id: Mapped[str] = mapped_column(ForeignKey("conv_files.id", ondelete="CASCADE"), primary_key=True)
    attached_at: Mapped[datetime] = mapped_column(default=utcnow)


class UsageRow(Base):
    """Requests and LLM tokens per principal and minute (``access.limits``): in the sessions' database, so
    replicas sharing a PostgreSQL share the counts. Rows older than the previous minute are deleted."""

    __tablename__ = "access_usage"

    principal: Mapped[str] = mapped_column(String(400), primary_key=True)
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)  # unix time // 60
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    tokens: Mapped[int] = mapped_column(BigInteger, default=0)


# --- OpenAI's vector stores and responses (``ragengine.vectorstores``, ``ragengine.responses``) ----------
class VectorStoreRow(Base):
    """What OpenAI's vector store object adds to an index: its id IS the index's name. Indexes made through
    the KAITO routes get a row the first time the vector store API sees them."""

    __tablename__ = "vs_stores"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(512))
    description: Mapped[str | None] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    expires_after_days: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_active_at: Mapped[datetime] = mapped_column(default=utcnow)


class VectorStoreFileRow(Base):
    """A file attached to a vector store: its ingestion into the store's index (status, error, the
    documents it wrote) and the job's lease, so one replica at a time works on it."""

    __tablename__ = "vs_files"

    store_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    file_id: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    error_code: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str | None] = mapped_column(Text)
    usage_bytes: Mapped[int] = mapped_column(Integer, default=0)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    chunking: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    doc_ids: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    batch_id: Mapped[str | None] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class FileBatchRow(Base):
    __tablename__ = "vs_file_batches"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    store_id: Mapped[str] = mapped_column(String(256), index=True)
    file_ids: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cancelled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ResponseRow(Base):
    """A stored response (``store: true``): the response object as answered, and its input items, which a
    follow-up (``previous_response_id``) replays with the output as the conversation so far."""

    __tablename__ = "resp_responses"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(400), index=True)  # as SessionRow.owner
    previous_response_id: Mapped[str | None] = mapped_column(String(64))
    body: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    input_items: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class EvaluationRow(Base):
    """One evaluation run of an index version on a golden set (``ragengine.evaluation``): the set and the
    settings it ran with, who ran it (its document ACL applies), its progress and, once done, its scores and
    per-question results. In this database so replicas share runs and a restart loses none."""

    __tablename__ = "eval_runs"
    __table_args__ = (Index("ix_eval_runs_index_created", "index_name", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    index_name: Mapped[str] = mapped_column(String(256))
    version: Mapped[int | None] = mapped_column(Integer)  # None until a queued run of the live version starts
    status: Mapped[str] = mapped_column(String(16), index=True)  # queued, running, succeeded, failed, interrupted
    trigger: Mapped[str] = mapped_column(String(16))  # api, gate, schedule
    owner: Mapped[str | None] = mapped_column(String(400), index=True)  # as SessionRow.owner; None: the engine
    acl: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {"tokens": [...]}; None: every document
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)  # questions + settings + ACL
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    questions: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # {"items": [...]}
    done: Mapped[int] = mapped_column(Integer, default=0)
    total: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    results: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {"items": [...], "missing": ..., "answers": ...}
    error: Mapped[str | None] = mapped_column(Text)
    runner: Mapped[str | None] = mapped_column(String(64))  # the replica running it
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)


class GoldenSetRow(Base):
    """A golden set handed to the engine by a source sync (``spec.evaluation.goldenSet.source``): the file's
    questions at the source's revision, for the index it scores (``ragengine.evaluation.config``)."""

    __tablename__ = "eval_golden_sets"

    index_name: Mapped[str] = mapped_column(String(256), primary_key=True)
    source: Mapped[str] = mapped_column(String(256))
    path: Mapped[str] = mapped_column(String(1024))
    revision: Mapped[str | None] = mapped_column(String(256))
    questions: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # {"items": [...]}
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
