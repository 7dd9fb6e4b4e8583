"""What one sync must do to make an index hold exactly a source's documents. Pure.

Contract of ``plan_sync(source, revision, files, indexed)``:

- every file becomes a document whose id is derived from the source name and the path
  (``doc_id(source, path)``), so ids are stable across syncs and a rename is a delete plus an add;
- a document's ``source_hash`` is the SHA-256 of its text and its metadata except the revision, so a
  file that did not change is *unchanged* whatever the revision: re-syncing an unchanged source writes
  and embeds nothing, and a new commit touching one file writes one document;
- ``add`` are ids the index does not hold, ``update`` ids it holds with another hash, ``delete`` ids
  it holds for this source that the source no longer has. Only documents carrying this source's name
  in their metadata are ever deleted: documents added by API, or by another source, are never touched.
- each written document's metadata says ``source``, ``path``, ``revision`` (the revision it was synced
  at), and ``url`` when the source has one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

MAX_DOC_ID = 512
SOURCE_KEY = "source"  # metadata key naming the source a document came from
HASH_KEY = "source_hash"


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str
    metadata: dict = field(default_factory=dict)
    url: str | None = None


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str
    metadata: dict

    def body(self) -> dict:
        return {"doc_id": self.doc_id, "text": self.text, "metadata": self.metadata}


@dataclass
class SyncPlan:
    add: list[Document] = field(default_factory=list)
    update: list[Document] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def empty(self) -> bool:
        return not (self.add or self.update or self.delete)


def doc_id(source: str, path: str) -> str:
    """``<source>:<path>``; paths too long for an id keep their tail and gain a hash of the whole."""
    full = f"{source}:{path}"
    if len(full) <= MAX_DOC_ID:
        return full
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:16]
    return f"{source}:~{digest}:{path[-(MAX_DOC_ID - len(source) - 20):]}"


def content_hash(text: str, metadata: dict) -> str:
    stable = {k: v for k, v in metadata.items() if k not in ("revision", HASH_KEY)}
    blob = json.dumps([text, stable], sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def documents(source: str, revision: str, files: list[SourceFile], extra: dict | None = None) -> list[Document]:
    out = []
    for f in files:
        meta = {**(extra or {}), **f.metadata, SOURCE_KEY: source, "path": f.path}
        if f.url:
            meta["url"] = f.url
        meta[HASH_KEY] = content_hash(f.text, meta)
        meta["revision"] = revision
        out.append(Document(doc_id(source, f.path), f.text, meta))
    return out


def plan_sync(source: str, revision: str, files: list[SourceFile], indexed: dict[str, str | None],
              extra: dict | None = None, kept: list[str] | None = None) -> SyncPlan:
    """``indexed``: id -> source_hash of the documents the index holds for this source; ``kept``: paths
    the reader knows are unchanged without reading them (HTTP 304), which stay as they are."""
    plan = SyncPlan()
    wanted = documents(source, revision, files, extra)
    for doc in wanted:
        held = indexed.get(doc.doc_id, "absent")
        if held == "absent":
            plan.add.append(doc)
        elif held != doc.metadata[HASH_KEY]:
            plan.update.append(doc)
        else:
            plan.unchanged += 1
    keep = {d.doc_id for d in wanted}
    held_kept = {doc_id(source, p) for p in kept or ()} & set(indexed)
    plan.unchanged += len(held_kept)
    keep |= held_kept
    plan.delete = sorted(d for d in indexed if d not in keep)
    return plan
