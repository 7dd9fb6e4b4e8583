"""OpenAI's file, vector store, vector store file and batch objects, built from the engine's records. Pure.

The mapping (docs/openai.md has it as a table):

- a file is an upload (``conversations``): ``status`` ``uploaded``/``processing`` → ``uploaded``,
  ``completed`` → ``processed``, ``failed`` → ``error`` with the reason in ``status_details``; the engine's
  own fields (``ingestion_status``, ``progress``, ``reason``, ...) ride along for the clients of before;
- a vector store is an index: its id is the index's name; ``file_counts`` and ``usage_bytes`` count the
  files attached through the API (documents written through ``/index`` are searchable, not counted);
  ``status`` is ``expired`` past ``expires_at``, ``in_progress`` while a file is, else ``completed``;
- a vector store file's ``chunking_strategy`` is what the engine used: always ``static`` with the sizes in
  force (``auto`` resolves to the index's own chunking, as OpenAI resolves it to 800/400).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ragengine.index.places import PLACE_KEYS, place_fields
from ragengine.index.types import ChunkingConfig

VS_FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")
FILE_STATUS = {"uploaded": "uploaded", "processing": "uploaded", "completed": "processed", "failed": "error"}
RESERVED_KEYS = ("file_id", "filename", "acl")  # chunk metadata the engine writes (or ACLs): not attributes
PLACE_FIELDS = (*PLACE_KEYS, "citation")  # a chunk's place: its own fields on a hit, not attributes
DEFAULT_PURPOSE = "assistants"


def unix(value: datetime | str | None) -> int | None:
    """Naive UTC (the store's) or ISO with ``Z`` → Unix seconds."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.removesuffix("Z"))
    return int(value.replace(tzinfo=UTC).timestamp())


@dataclass(frozen=True)
class StoreRecord:
    id: str
    name: str | None
    description: str | None
    metadata: dict
    expires_after_days: int | None
    created_at: datetime
    last_active_at: datetime

    def expires_at(self) -> datetime | None:
        if self.expires_after_days is None:
            return None
        return self.last_active_at + timedelta(days=self.expires_after_days)

    def expired(self, now: datetime) -> bool:
        expires = self.expires_at()
        return expires is not None and expires <= now


@dataclass(frozen=True)
class StoreFileRecord:
    store_id: str
    file_id: str
    status: str
    error_code: str | None
    error_message: str | None
    usage_bytes: int
    attributes: dict
    chunking: dict
    doc_ids: tuple[str, ...]
    batch_id: str | None
    created_at: datetime
    lease_owner: str | None = None
    attempts: int = 0


@dataclass(frozen=True)
class BatchRecord:
    id: str
    store_id: str
    file_ids: tuple[str, ...]
    cancelled: bool
    created_at: datetime


@dataclass(frozen=True)
class StoreStats:
    counts: Counter = field(default_factory=Counter)
    usage_bytes: int = 0


def file_counts(statuses: Iterable[str] | Counter) -> dict[str, int]:
    counts = statuses if isinstance(statuses, Counter) else Counter(statuses)
    out = {s: counts.get(s, 0) for s in VS_FILE_STATUSES}
    out["total"] = sum(out.values())
    return out


def file_object(info: Any) -> dict[str, Any]:
    """An upload (``conversations.records.FileInfo``) as OpenAI's file object, plus the engine's fields."""
    failed = info.status == "failed"
    return {
        "id": info.id, "object": "file", "bytes": info.size_bytes, "created_at": unix(info.created_at),
        "filename": info.filename, "purpose": info.purpose or DEFAULT_PURPOSE, "status": FILE_STATUS[info.status],
        "status_details": info.reason if failed else None, "expires_at": unix(info.expires_at),
        # the engine's own, as before OpenAI's shape: ingestion into the conversations index
        "file_id": info.id, "ingestion_status": info.status, "content_type": info.content_type,
        "size_bytes": info.size_bytes, "progress": info.progress, "reason": info.reason, "documents": info.documents,
        "updated_at": info.updated_at,
    }


def store_status(record: StoreRecord, counts: dict[str, int], now: datetime) -> str:
    if record.expired(now):
        return "expired"
    return "in_progress" if counts["in_progress"] else "completed"


def vector_store_object(record: StoreRecord, stats: StoreStats, now: datetime) -> dict[str, Any]:
    counts = file_counts(stats.counts)
    expires = record.expires_at()
    return {
        "id": record.id, "object": "vector_store", "created_at": unix(record.created_at),
        "name": record.name if record.name is not None else record.id, "description": record.description,
        "usage_bytes": stats.usage_bytes, "file_counts": counts, "status": store_status(record, counts, now),
        "expires_after": ({"anchor": "last_active_at", "days": record.expires_after_days}
                          if record.expires_after_days is not None else None),
        "expires_at": unix(expires), "last_active_at": unix(record.last_active_at), "metadata": record.metadata,
    }


def vector_store_file_object(record: StoreFileRecord) -> dict[str, Any]:
    error = ({"code": record.error_code, "message": record.error_message or ""}
             if record.status == "failed" and record.error_code else None)
    return {
        "id": record.file_id, "object": "vector_store.file", "created_at": unix(record.created_at),
        "vector_store_id": record.store_id, "status": record.status, "last_error": error,
        "usage_bytes": record.usage_bytes, "attributes": record.attributes or {},
        "chunking_strategy": record.chunking or {"type": "auto"},
    }


def batch_status(batch: BatchRecord, counts: dict[str, int]) -> str:
    if counts["in_progress"]:
        return "cancelled" if batch.cancelled else "in_progress"
    if batch.cancelled:
        return "cancelled"
    return "failed" if counts["total"] and counts["failed"] == counts["total"] else "completed"


def batch_object(batch: BatchRecord, statuses: Iterable[str]) -> dict[str, Any]:
    counts = file_counts(statuses)
    return {"id": batch.id, "object": "vector_store.files_batch", "created_at": unix(batch.created_at),
            "vector_store_id": batch.store_id, "status": batch_status(batch, counts), "file_counts": counts}


# --- chunking strategies ---------------------------------------------------------------------------------
def static_strategy(config: ChunkingConfig) -> dict[str, Any]:
    return {"type": "static", "static": {"max_chunk_size_tokens": config.chunk_size,
                                         "chunk_overlap_tokens": config.chunk_overlap}}


def effective_chunking(requested: dict | None, index: ChunkingConfig) -> ChunkingConfig:
    """The chunking a file gets in an index: ``auto`` (or none) is the index's; ``static`` sizes are capped by
    the index's chunk size (which the embedding model's window already caps), overlap at half a chunk."""
    if not requested or requested.get("type") != "static":
        return index
    static = requested["static"]
    size = min(int(static["max_chunk_size_tokens"]), index.chunk_size)
    overlap = min(int(static["chunk_overlap_tokens"]), size // 2)
    return ChunkingConfig(chunk_size=size, chunk_overlap=overlap, splitter=index.splitter,
                          code_chunk_lines=index.code_chunk_lines, contextual=index.contextual)


# --- search results ---------------------------------------------------------------------------------------
def attributes_of(metadata: dict | None) -> dict[str, Any]:
    """A chunk's metadata as OpenAI attributes: scalar values only, the engine's own keys left out."""
    return {k: v for k, v in (metadata or {}).items()
            if k not in RESERVED_KEYS and k not in PLACE_FIELDS and not k.startswith("_")
            and isinstance(v, (str, int, float, bool))}


def file_of(doc_id: str, metadata: dict | None) -> tuple[str, str]:
    """(file_id, filename) of a hit: the attached file's, or for a document written through ``/index`` its
    ``doc_id`` and its ``filename`` / ``title`` / ``source`` metadata (else the doc_id)."""
    meta = metadata or {}
    file_id = meta.get("file_id")
    file_id = file_id if isinstance(file_id, str) else doc_id
    for key in ("filename", "title", "source"):
        name = meta.get(key)
        if isinstance(name, str) and name:
            return file_id, name
    return file_id, doc_id


def search_result(node: Any) -> dict[str, Any]:
    file_id, filename = file_of(node.doc_id, node.metadata)
    return {"file_id": file_id, "filename": filename, "score": round(float(node.score), 6),
            "attributes": attributes_of(node.metadata), "content": [{"type": "text", "text": node.text}],
            **place_fields(node.metadata)}
