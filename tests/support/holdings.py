"""Everything an engine holds, as one comparable value: what "a refused request changes nothing" compares.

``holdings(base, headers, app)``, from outside and from inside the running engine (read-only both ways):

- every index a client sees (``GET /indexes`` as an admin): its export (decoded: the header without its
  ``created_at``, every document with its text, metadata, chunks and vectors, bit for bit), its versions
  and its document list;
- what the version layer stores: every physical index of the store (every version, hidden imports and
  loads included, and on FAISS those that did not load) with, for each document, the digest of its text
  and metadata (``digests``), its chunks and the SHA-256 of its vectors, and the version books as stored;
- every row of every table of the session database (sessions, threads, messages, uploads and their
  blobs, vector stores, their files and batches, stored responses, usage);
- on FAISS, every file under ``persist/`` (the ``/persist`` copies), by its SHA-256.

Reads only: ``GET /v1/vector_stores`` is not used, as it records a store for each index it has not seen.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from ragengine.conversations.models import Base
from ragengine.index.documents import content_digest


def export_digest(data: bytes) -> str:
    """An export's content: its lines without the header's ``created_at`` and the trailer (which hashes it)."""
    lines = gzip.decompress(data).decode("utf-8").splitlines()
    head = {k: v for k, v in json.loads(lines[0]).items() if k != "created_at"}
    body = sorted(lines[1:-1])
    return hashlib.sha256(json.dumps([head, body]).encode()).hexdigest()


def _documents(client: httpx.Client, name: str) -> list[dict]:
    out: list[dict] = []
    while True:
        page = client.get(f"/indexes/{name}/documents", params={"limit": 100, "offset": len(out),
                                                                "max_text_length": 10_000_000})
        page.raise_for_status()
        out += page.json()["documents"]
        if len(out) >= page.json()["total_items"] or not page.json()["documents"]:
            return out


def _physical(registry: Any) -> dict[str, Any]:
    inner = registry.inner
    if inner.kind == "faiss":
        out: dict[str, Any] = {}
        for name, state in sorted(inner._indexes.items()):
            with state.rw.read():
                out[name] = {r.doc_id: (content_digest(r.text, r.metadata),
                                        hashlib.sha256(state.doc_vectors(r).tobytes()).hexdigest())
                             for r in state.docs.values()}
        out.update({f"not loaded: {name}": why for name, why in sorted(inner.corrupt.items())})
        return out
    out = {}
    for name in sorted(inner.adapter.indexes()):
        digests = inner.adapter.digests(name)
        chunks = inner.adapter.chunks_of(name, sorted(digests))
        out[name] = {d: (digest, repr([(c.seq, c.text) for c in chunks[d][0]]) if d in chunks else None,
                         hashlib.sha256(chunks[d][1].tobytes()).hexdigest() if d in chunks else None)
                     for d, digest in digests.items()}
    return out


def _books(registry: Any) -> dict[str, Any]:
    books = registry.books
    raw = books._read_all() if hasattr(books, "_read_all") else books.adapter.books()
    return {name: book for name, book in raw.items() if name != "/replicas"}  # heartbeats: time, not content


def _tables(engine: Any) -> dict[str, list[str]]:
    out = {}
    with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            out[table.name] = sorted(repr(tuple(row)) for row in conn.execute(select(table)))
    return out


def _files(root: Path) -> dict[str, str]:
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in sorted(root.rglob("*"))}


def holdings(base: str, headers: dict[str, str], app: Any, *, listed: bool = True) -> dict[str, Any]:
    """``listed=False``: without what the API shows of each index (export, versions, documents), which the
    physical indexes and the books hold (a cheaper check, for each of many requests)."""
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
        names = client.get("/indexes").json()
        out["indexes"] = names
        for name in names if listed else ():
            export = client.get(f"/indexes/{name}/export")
            out[f"index {name}: export"] = export_digest(export.content) if export.status_code == 200 else export.text
            versions = client.get(f"/indexes/{name}/versions")
            versions.raise_for_status()
            out[f"index {name}: versions"] = versions.json()
            out[f"index {name}: documents"] = _documents(client, name)
    registry = app.state.registry
    out["physical indexes"] = _physical(registry)
    out["version books"] = _books(registry)
    out["session database"] = _tables(app.state.sessions.engine)
    out["persist/"] = _files(Path(app.state.settings.data_dir) / "persist")
    return out


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What changed, key by key (a short description of each difference)."""
    changed = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            inner = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            changed.append(f"{key}: {', '.join(map(str, inner))[:600]}")
        else:
            changed.append(f"{key}: {str(old)[:300]} -> {str(new)[:300]}")
    return changed
