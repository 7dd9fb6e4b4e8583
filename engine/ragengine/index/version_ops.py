"""What the version layer (``ragengine.versions``) asks of the embedded store, beside the document
API: create an empty index, read its documents' digests, make it hold a given set (``sync_documents``),
and copy documents with their vectors (``export_batches`` / ``import_batch``, no re-embedding).

``stores.registry.StoreRegistry`` has the same methods for the external stores. A part of
``IndexRegistry`` (``registry.py``), built on its write path (``_state_for_write``, ``_prepare``,
``_commit``) and its index states."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import numpy as np

from ragengine.errors import BadRequest
from ragengine.index.documents import NewDoc, content_digest, split_keys_changed
from ragengine.index.state import IndexState

if TYPE_CHECKING:
    from ragengine.index.durability import Durability


class VersionOps:
    """The version layer's methods of ``IndexRegistry``."""

    if TYPE_CHECKING:  # what IndexRegistry provides
        _indexes: dict[str, IndexState]
        durability: Durability

        def get(self, name: str) -> IndexState: ...
        async def _state_for_write(self, name: str, chunking: dict | None) -> IndexState: ...
        async def _prepare(self, state: IndexState, docs: list[NewDoc]) -> tuple[list[dict], np.ndarray]: ...
        async def _commit(self, state: IndexState, op: dict, vectors: np.ndarray | None) -> None: ...

    async def ensure(self, name: str, chunking: dict | None) -> None:
        """Create index ``name`` (its folder too) when it does not exist: a new version exists while empty."""
        state = await self._state_for_write(name, chunking)
        async with state.lock:
            await self.durability.create(state)

    async def dim_of(self, name: str) -> int | None:
        state = self._indexes.get(name)
        return state.dim if state is not None else None

    async def config_of(self, name: str) -> dict:
        return self.get(name).config.to_dict()

    async def digests(self, name: str) -> dict[str, str]:
        """doc_id -> digest of its text and metadata (what a version must hold the same of)."""
        state = self._indexes.get(name)
        if state is None:
            return {}

        def run() -> dict[str, str]:
            with state.rw.read():
                records = list(state.docs.values())
            return {r.doc_id: content_digest(r.text, r.metadata) for r in records}

        return await asyncio.to_thread(run)

    async def fetch(self, name: str, doc_ids: list[str]) -> dict[str, NewDoc]:
        state = self._indexes.get(name)
        if state is None:
            return {}
        return {d: NewDoc(d, rec.text, rec.metadata) for d in doc_ids if (rec := state.docs.get(d)) is not None}

    async def sync_documents(self, name: str, docs: list[NewDoc], *, chunking: dict | None = None,
                             source: str | None = None) -> int:
        """Make ``name`` hold ``docs`` as given (add the missing, re-embed a changed text, keep the vectors
        of a metadata-only change); with ``source``, only the documents ``source`` still holds exactly so
        (checked under both indexes' locks, so an older copy never overwrites a newer write). Embedding
        runs before the locks. -> documents written."""
        state = await self._state_for_write(name, chunking)
        held = held_documents(state, docs)
        changed = [d for d in docs if d.doc_id not in held or held[d.doc_id][0] != d.text
                   or split_keys_changed(held[d.doc_id][1], d.metadata)]
        adds, vectors = await self._prepare(state, changed) if changed else ([], None)
        src = self._indexes.get(source) if source is not None else None
        if source is not None and src is None:
            return 0
        locks = sorted({id(x): x for x in (state, src) if x is not None}.values(), key=lambda x: x.name)
        async with contextlib.AsyncExitStack() as stack:
            for x in locks:
                await stack.enter_async_context(x.lock)
            wanted = {d.doc_id: d for d in docs}
            if src is not None:  # only what the source still holds exactly as given
                wanted = {k: d for k, d in wanted.items()
                          if (rec := src.docs.get(k)) is not None and rec.text == d.text and rec.metadata == d.metadata}
            now = held_documents(state, list(wanted.values()))
            ops: list[dict] = []
            parts: list[np.ndarray] = []
            pos = 0
            for a in adds:
                n = len(a["spans"])
                if a["id"] in wanted and now.get(a["id"]) == held.get(a["id"]):  # the target did not move meanwhile
                    ops.append(a)
                    parts.append(vectors[pos:pos + n])  # type: ignore[index]
                pos += n
            embedded = {a["id"] for a in adds}
            for doc_id, doc in wanted.items():
                rec = state.docs.get(doc_id)
                if doc_id in embedded or rec is None or rec.text != doc.text or rec.metadata == doc.metadata \
                        or split_keys_changed(rec.metadata, doc.metadata):
                    continue
                ops.append({"id": doc_id, "text": doc.text, "meta": doc.metadata, "spans": rec.span_list(),
                            **({"tokens": rec.tokens} if rec.tokens else {})})  # metadata only: same vectors
                parts.append(state.doc_vectors(rec))
            if ops:
                op = {"delete": [a["id"] for a in ops if a["id"] in state.docs], "add": ops}
                await self._commit(state, op, np.concatenate(parts))
            return len(ops)

    async def export_batches(self, name: str, batch: int = 256) -> AsyncIterator[list[dict]]:
        """Every document with its spans, token counts and vectors, ``batch`` at a time (each batch read
        under the read lock; a document replaced or deleted meanwhile is left out of that batch)."""
        state = self.get(name)
        ids = list(state.docs)
        for i in range(0, len(ids), batch):
            def read(part: list[str] = ids[i:i + batch]) -> list[dict]:
                out = []
                with state.rw.read():
                    for doc_id in part:
                        rec = state.docs.get(doc_id)
                        if rec is not None:
                            out.append({"id": rec.doc_id, "text": rec.text, "meta": rec.metadata,
                                        "spans": rec.span_list(), "tokens": rec.tokens,
                                        "vectors": state.doc_vectors(rec)})
                return out

            yield await asyncio.to_thread(read)

    async def finish_load(self, name: str) -> None:
        """Nothing to build after a bulk load: FAISS grows its HNSW graph as it writes (``Durability.migrate``)."""

    async def import_batch(self, name: str, config: dict, docs: list[dict]) -> None:
        """Write exported documents as they are (spans, token counts, vectors): no chunking, no embedding."""
        state = await self._state_for_write(name, config)
        if not docs:
            return
        dims = {d["vectors"].shape[1] for d in docs if len(d["vectors"])}
        if dims - {state.dim}:
            raise BadRequest(f"vectors of dimension {sorted(dims)} do not fit index '{name}' ({state.dim})")
        adds = [{"id": d["id"], "text": d["text"], "meta": d["meta"], "spans": d["spans"],
                 **({"tokens": d["tokens"]} if d.get("tokens") else {})} for d in docs]
        async with state.lock:
            op = {"delete": [a["id"] for a in adds if a["id"] in state.docs], "add": adds}
            await self._commit(state, op, np.concatenate([d["vectors"] for d in docs]))


def held_documents(state: IndexState, docs: list[NewDoc]) -> dict[str, tuple[str, dict]]:
    """What the index holds of these documents, as the shared document operations see it."""
    return {d.doc_id: (rec.text, rec.metadata) for d in docs if (rec := state.docs.get(d.doc_id)) is not None}

