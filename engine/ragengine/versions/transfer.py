"""Whole indexes in and out of the version layer: exports, imports (``archive``'s format) and ``/load`` (FAISS).

An import or a load is read into a hidden index first ("<name>/import-..." or "<name>/load-...") and becomes
index ``name`` in one book write only once all of it checked out; whatever fails before removes the hidden
index, and what a crash leaves of one is dropped by the next start (``upkeep.Upkeep``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator

from ragengine.embedding.pool import ModelRef
from ragengine.errors import Conflict, NotFound
from ragengine.index import disk
from ragengine.index.chunking import new_index_config
from ragengine.index.documents import NewDoc
from ragengine.versions import archive
from ragengine.versions import book as bk
from ragengine.versions.book import Book
from ragengine.versions.state import VersionState


async def export(state: VersionState, name: str) -> AsyncIterator[bytes]:
    book = await state.book(name)
    live = book.live_version
    if live.model is None:
        raise Conflict(state.unknown_model(book))
    config = await state.inner.config_of(live.physical)
    ref = ModelRef.parse(live.model)
    head = archive.header(name, config, {"key": live.model, **ref.to_dict(), "dim": live.dim}, time.time())
    return archive.encode(head, state.inner.export_batches(live.physical))


async def import_(state: VersionState, name: str, body: AsyncIterator[bytes]) -> dict:
    """Read an export as it arrives into a hidden index; it becomes index ``name`` (version 1) only once the
    whole file checked out. Vectors are kept when the export's model is the engine's, else re-embedded."""
    disk.validate_name(name)
    if name in state.cache or (state.shared and await state.fresh(name) is not None):
        raise Conflict(f"Index '{name}' already exists: delete it first, or import under another name.")
    inner, settings = state.inner, state.settings
    target = state.embedders.target
    embedder = state.embedders.default
    physical = f"{name}{bk.SEP}import-{int(time.time())}-{uuid.uuid4().hex[:8]}"
    state.models.record(physical, target.key)
    # Each line checked as POST /index checks a document; a line no valid document needs is refused early.
    reader = archive.ArchiveReader(archive.line_limit(settings.max_document_chars, settings.max_body_bytes),
                                   max_chars=settings.max_document_chars)
    reuse: bool | None = None
    config: dict | None = None
    try:
        async for data in body:
            for docs in reader.batches(data):
                if reuse is None:
                    assert reader.header is not None, "documents come after the header"
                    reuse, config = await _import_target(state, physical, reader.header)
                assert config is not None, "set with reuse, from the header"
                if reuse:
                    await inner.import_batch(physical, config, docs)
                else:
                    await inner.sync_documents(physical, [NewDoc(d["id"], d["text"], d["meta"]) for d in docs],
                                               chunking=config)
            if reader.header is not None and reuse is None:
                reuse, config = await _import_target(state, physical, reader.header)
        trailer = reader.finish()
        assert config is not None
        dim = await inner.dim_of(physical) or embedder.dim
        fresh = bk.follow_target(bk.new_book(name, target.key, dim, config, time.time()), target.key, state.generation)
        fresh = dataclasses.replace(fresh, versions=(dataclasses.replace(fresh.versions[0], physical=physical),))

        def commit(cur: Book | None) -> Book:
            if cur is not None:
                raise Conflict(f"Index '{name}' was created while the import ran: nothing was imported.")
            return fresh

        await state.update(name, commit)
    except BaseException:
        state.models.forget(physical)
        with contextlib.suppress(Exception):
            if inner.exists(physical):
                await inner.delete_index(physical)
        raise
    head = reader.header or {}
    return {"index": name, "documents": trailer["documents"], "chunks": trailer["chunks"],
            "vectors": "reused" if reuse else "re-embedded", "source_index": head.get("index"),
            "source_embedding_model": (head.get("embedding") or {}).get("key"), "embedding_model": target.key}


async def _import_target(state: VersionState, physical: str, head: dict) -> tuple[bool, dict]:
    """Whether an import keeps the export's vectors (same model), and the hidden index's chunking."""
    target, embedder = state.embedders.target, state.embedders.default
    emb = head["embedding"]
    reuse = emb.get("key") == target.key and emb.get("dim") == embedder.dim
    config = head["chunking"] if reuse else new_index_config(state.settings, head["chunking"],
                                                             embedder.chunk_token_limit).to_dict()
    await state.inner.ensure(physical, config)
    return reuse, config


async def load(state: VersionState, name: str, path: str | None, overwrite: bool) -> str:
    """Index ``name`` from a ``/persist`` copy, replacing the index with ``overwrite``. The copy is checked and
    read into a hidden index first (a bad path, a missing folder or a damaged copy is refused there, with
    nothing touched), then becomes the index in one book write; the old versions are dropped after it (a
    crash between the two leaves them to the next start's clean-up). Never a moment without the index."""
    disk.validate_name(name)
    if name in state.cache and not overwrite:
        raise Conflict(f"Index '{name}' already exists. Use a different name or delete the existing index first.")
    inner, embedders = state.inner, state.embedders
    hidden = f"{name}{bk.SEP}load-{int(time.time())}-{uuid.uuid4().hex[:8]}"
    old: list[bk.Version] = []
    try:
        where = await inner.load(hidden, path if path is not None else disk.dir_name(name))
        dim = await inner.dim_of(hidden)
        model = embedders.target.key if dim == embedders.default.dim else None
        fresh = bk.new_book(name, model, int(dim or 0), await inner.config_of(hidden), time.time())
        fresh = bk.follow_target(fresh, embedders.target.key, state.generation)
        fresh = dataclasses.replace(fresh, versions=(dataclasses.replace(fresh.versions[0], physical=hidden),))

        def swap(cur: Book | None) -> Book:
            if cur is not None:
                if not overwrite:
                    raise Conflict(f"Index '{name}' was created while the copy was read: nothing was loaded.")
                old.extend(cur.versions)
            return fresh

        await state.update(name, swap)
    except BaseException:
        with contextlib.suppress(Exception):
            if inner.exists(hidden):
                await inner.delete_index(hidden)
        raise
    await state.stop_job(name)  # a job of the replaced index has nothing left to build
    await state.drop(old)
    if name in inner.corrupt:  # an index made before versions that could not be loaded: replaced now
        with contextlib.suppress(NotFound):
            await inner.delete_index(name)
    return where
