"""Writes through the version layer: each goes to the live version first (its answer is the client's: 409s and
all), then is mirrored to every other version in ``Book.write_targets`` (a version being built, or a retired one
being brought up to date) as what the live version now holds of those documents (``sync_documents`` with the
written version as ``source``, so an older copy never lands over a newer one). The book is read again after the
write, so a write that crosses a swap still reaches the new live version.

The first write to a name makes its book (version 1, the target model); deleting an index marks its book
``deleting`` first, so a crash half-way is finished by the next start (``upkeep.Upkeep``).
"""

from __future__ import annotations

import contextlib
import logging
import time

import numpy as np

from ragengine import metrics
from ragengine.errors import Conflict, NotFound
from ragengine.index import disk
from ragengine.index.chunking import new_index_config
from ragengine.index.documents import clean_documents, content_id
from ragengine.versions import book as bk
from ragengine.versions.book import Book
from ragengine.versions.state import VersionState

log = logging.getLogger(__name__)


async def _create(state: VersionState, name: str, chunking: dict | None) -> Book:
    embedder = state.embedders.default
    config = new_index_config(state.settings, chunking, embedder.chunk_token_limit).to_dict()
    book = bk.new_book(name, state.embedders.target.key, embedder.dim, config, time.time())
    book = bk.follow_target(book, state.embedders.target.key, state.generation)
    made = await state.update(name, lambda cur: cur or book)
    assert made is not None
    return made


def _writable(state: VersionState, book: Book) -> bk.Version:
    live = book.live_version
    if live.model is None:
        raise Conflict(state.unknown_model(book))
    return live


async def add_documents(state: VersionState, index_name: str, documents: list[dict],
                        chunking: dict | None = None) -> list[dict]:
    disk.validate_name(index_name)
    if not documents:
        return []
    created = False
    if index_name not in state.cache:
        found = await state.fresh(index_name) if state.shared else None
        if found is None:
            clean_documents(documents, max_chars=state.settings.max_document_chars)  # 4xx before a book exists
            await _create(state, index_name, chunking)
            created = True
    book = await state.book(index_name)
    live = _writable(state, book)
    try:
        out = await state.inner.add_documents(live.physical, documents, chunking)
    except Exception:
        if created:
            await _uncreate(state, index_name)
        raise
    await mirror(state, index_name, live.physical, [d["doc_id"] for d in out])
    return out


async def _uncreate(state: VersionState, name: str) -> None:
    """A first write that failed leaves no index behind (as before versions existed)."""
    book = state.cache.get(name)
    if book is None:
        return
    counts = (await state.inner.digests(book.live_version.physical)) if state.inner.exists(book.live_version.physical) else {}
    if not counts:
        await state.update(name, lambda cur: None if cur is not None and cur.live == 1 and cur.running_job is None
                           else cur)
        with contextlib.suppress(NotFound):
            await state.inner.delete_index(book.live_version.physical)


async def add_precomputed(state: VersionState, index_name: str, texts: list[str], vectors: np.ndarray,
                          metadatas: list[dict] | None = None) -> None:
    """One-chunk documents with given unit vectors, which must come from the engine's model (benchmarks)."""
    disk.validate_name(index_name)
    if index_name not in state.cache:
        await _create(state, index_name, None)
    book = await state.book(index_name)
    live = _writable(state, book)
    await state.inner.add_precomputed(live.physical, texts, vectors, metadatas)
    await mirror(state, index_name, live.physical, [content_id(t) for t in texts])


async def update_documents(state: VersionState, index_name: str, documents: list[dict]) -> dict:
    return await _update(state, index_name, documents, metadata_only=False)


async def update_metadata(state: VersionState, index_name: str, documents: list[dict]) -> dict:
    return await _update(state, index_name, documents, metadata_only=True)


async def _update(state: VersionState, index_name: str, documents: list[dict], *, metadata_only: bool) -> dict:
    """An update on the live version, then mirrored to the others (the documents it updated)."""
    live = _writable(state, await state.book(index_name))
    update = state.inner.update_metadata if metadata_only else state.inner.update_documents
    out = await update(live.physical, documents)
    await mirror(state, index_name, live.physical, [d["doc_id"] for d in out["updated_documents"]])
    return out


async def delete_documents(state: VersionState, index_name: str, doc_ids: list[str]) -> dict:
    book = await state.book(index_name)
    live = book.live_version
    out = await state.inner.delete_documents(live.physical, doc_ids)
    await mirror(state, index_name, live.physical, out["deleted_doc_ids"])
    return out


async def mirror(state: VersionState, name: str, written: str, doc_ids: list[str]) -> None:
    """Make every other version that takes writes hold what ``written`` now holds of ``doc_ids``."""
    if not doc_ids:
        return
    book = await state.fresh(name)
    if book is None:
        return
    for target in book.write_targets():
        if target.physical == written:
            continue
        try:
            await _copy(state, written, target, doc_ids)
        except Exception as exc:
            if book.live == target.version:  # the write crossed a swap: the live version must have it
                raise
            # A version being built: its next comparison pass copies what this write left out.
            log.warning("write to %r not mirrored to version %d yet (%s): the build catches up", name,
                        target.version, exc)


async def _copy(state: VersionState, source: str, target: bk.Version, doc_ids: list[str]) -> None:
    docs = await state.inner.fetch(source, doc_ids)
    if docs:
        await state.inner.sync_documents(target.physical, list(docs.values()), chunking=target.chunking, source=source)
    gone = [d for d in doc_ids if d not in docs]
    if gone and state.inner.exists(target.physical):
        await state.inner.delete_documents(target.physical, gone)


async def delete_index(state: VersionState, name: str) -> None:
    if name not in state.cache and name in state.inner.corrupt and not state.shared:
        await state.inner.delete_index(name)  # an index that could not be loaded, made before versions
        return
    book = await state.book(name)

    def mark(data: dict | None) -> dict | None:
        if data is None:
            raise NotFound(f"No such index: '{name}' exists.")
        return {**data, "deleting": True}

    await state.books.update(name, mark)
    state.remember(name, {"deleting": True})
    await state.stop_job(name)
    await state.drop(list(book.versions))
    await state.books.update(name, lambda _data: None)
    state.remember(name, None)
    state.deleting.discard(name)
    metrics.forget_index(name)
