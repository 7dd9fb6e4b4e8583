"""What one sync must do to make an index hold exactly a source's documents. Pure.

Contract of ``plan_sync(source, revision, files, indexed, extra, kept)``:

- every file becomes a document whose id is derived from the source name and the path
  (``doc_id(source, path)``), so ids are stable across syncs and a rename is a delete plus an add;
- a document's metadata is the source's own (``extra``: the spec's metadata, its ACL, which may depend
  on the path through ``aclRules``) under the file's (format, language, ETag, ...), plus ``source``,
  ``path``, ``url`` when the source has one, and the bookkeeping keys: ``revision`` (the revision it was
  written at), ``text_hash`` (SHA-256 of its text), ``source_keys`` (which keys came from ``extra``) and
  ``source_hash`` (of its text hash and its metadata except the bookkeeping), so a file that did not
  change is *unchanged* whatever the revision: re-syncing an unchanged source writes and embeds nothing,
  and a new commit touching one file writes one document;
- ``add`` are ids the index does not hold, ``update`` ids it holds with another hash (the engine keeps the
  chunks and vectors of a document whose text did not change: a metadata-only change embeds nothing),
  ``delete`` ids it holds for this source that the source no longer has. Only documents carrying this
  source's name in their metadata are ever deleted: documents added by API, or by another source, are
  never touched;
- ``kept`` are paths the reader knows are unchanged without reading them (an HTTP 304, an S3 object at
  the same ETag): they stay, and when the source's own metadata changed for them (an edited ACL rule)
  they go in ``relabel``: their new metadata, built from what the index holds, written without the text
  (``POST /indexes/{name}/documents/metadata``). A kept path whose ``extra`` is None (no ACL rule
  matches it any more) is deleted: fail closed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_DOC_ID = 512
SOURCE_KEY = "source"  # metadata key naming the source a document came from
HASH_KEY = "source_hash"
TEXT_HASH_KEY = "text_hash"
SOURCE_KEYS_KEY = "source_keys"
BOOKKEEPING = ("revision", HASH_KEY, TEXT_HASH_KEY, SOURCE_KEYS_KEY)
Extra = Mapping[str, Any] | Callable[[str], Mapping[str, Any] | None] | None


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
    relabel: list[tuple[str, dict]] = field(default_factory=list)  # (id, new metadata): kept unread, text as held
    unchanged: int = 0

    @property
    def empty(self) -> bool:
        return not (self.add or self.update or self.delete or self.relabel)


def doc_id(source: str, path: str) -> str:
    """``<source>:<path>``; paths too long for an id keep their tail and gain a hash of the whole."""
    full = f"{source}:{path}"
    if len(full) <= MAX_DOC_ID:
        return full
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:16]
    return f"{source}:~{digest}:{path[-(MAX_DOC_ID - len(source) - 20):]}"


def _stable(metadata: Mapping[str, Any]) -> dict:
    return {k: v for k, v in metadata.items() if k not in BOOKKEEPING}


def content_hash(text_hash: str, metadata: Mapping[str, Any]) -> str:
    blob = json.dumps([text_hash, _stable(metadata)], sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def legacy_hash(text: str, metadata: Mapping[str, Any]) -> str:
    """The hash documents written before ``text_hash`` carry: they stay unchanged, nothing is rewritten."""
    blob = json.dumps([text, _stable(metadata)], sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def extra_of(extra: Extra, path: str) -> Mapping[str, Any] | None:
    return extra(path) if callable(extra) else (extra or {})


def _metadata(source: str, path: str, url: str | None, own: Mapping[str, Any], file_meta: Mapping[str, Any],
              digest: str, revision: str) -> dict:
    meta = {**own, **file_meta, SOURCE_KEY: source, "path": path}
    if url:
        meta["url"] = url
    keys = sorted(k for k in own if k not in file_meta and k not in (SOURCE_KEY, "path", "url"))
    if keys:
        meta[SOURCE_KEYS_KEY] = keys
    meta[TEXT_HASH_KEY] = digest
    meta[HASH_KEY] = content_hash(digest, meta)
    meta["revision"] = revision
    return meta


def documents(source: str, revision: str, files: list[SourceFile], extra: Extra = None) -> list[Document]:
    """The documents of ``files``; a file whose ``extra`` is None is left out (the caller reports it)."""
    out = []
    for f in files:
        own = extra_of(extra, f.path)
        if own is None:
            continue
        meta = _metadata(source, f.path, f.url, own, f.metadata, text_hash(f.text), revision)
        out.append(Document(doc_id(source, f.path), f.text, meta))
    return out


def relabelled(held: Mapping[str, Any], own: Mapping[str, Any]) -> dict | None:
    """The metadata a kept document gets under the source's new ``own`` metadata, or None when the index
    holds it without a text hash (written before them: it keeps its metadata until its text is read)."""
    digest = held.get(TEXT_HASH_KEY)
    if not isinstance(digest, str):
        return None
    dropped = set(held.get(SOURCE_KEYS_KEY) or ()) | set(BOOKKEEPING) | {SOURCE_KEY, "path", "url"}
    file_meta = {k: v for k, v in held.items() if k not in dropped}
    return _metadata(str(held.get(SOURCE_KEY)), str(held.get("path")), held.get("url"), own, file_meta, digest,
                     str(held.get("revision", "")))


def _unchanged(doc: Document, held: Mapping[str, Any]) -> bool:
    stored = held.get(HASH_KEY)
    return stored == doc.metadata[HASH_KEY] or (TEXT_HASH_KEY not in held and stored == legacy_hash(doc.text, doc.metadata))


def plan_sync(source: str, revision: str, files: list[SourceFile], indexed: Mapping[str, Mapping[str, Any]],
              extra: Extra = None, kept: list[str] | None = None) -> SyncPlan:
    """``indexed``: id -> metadata of the documents the index holds for this source; ``extra``: the source's own
    metadata, or a function of the path giving it (None: the path may not be indexed)."""
    plan = SyncPlan()
    wanted = documents(source, revision, files, extra)
    for doc in wanted:
        held = indexed.get(doc.doc_id)
        if held is None:
            plan.add.append(doc)
        elif not _unchanged(doc, held):
            plan.update.append(doc)
        else:
            plan.unchanged += 1
    keep = {d.doc_id for d in wanted}
    for path in kept or ():
        key, own = doc_id(source, path), extra_of(extra, path)
        held = indexed.get(key)
        if held is None or own is None:
            continue
        keep.add(key)
        meta = relabelled(held, own)
        if meta is None or meta[HASH_KEY] == held.get(HASH_KEY):
            plan.unchanged += 1
        else:
            plan.relabel.append((key, meta))
    plan.delete = sorted(d for d in indexed if d not in keep)
    return plan
