"""Move indexes from the embedded FAISS data directory into an external store, without re-embedding.

``ragengine migrate --from faiss:<data dir> --to postgres://… | milvus:<uri>`` reads every index folder
(snapshot + journal, exactly as the engine restores them), and writes each document with its chunks
and the vectors FAISS already holds. Resumable: documents already in the target with the same text
are skipped (the adapter's ``add_only`` write), so an interrupted run is simply run again; a document
whose id exists in the target with other text is reported, not overwritten.

Index versions (docs/versions.md): each index's live version is copied under the index's own name, with a
version book naming the model that made it (so the target engine queries it with that model); earlier and
half-built versions stay behind.

This is the upgrade path from one engine pod to many: migrate, then set ``spec.storage.vectorStore`` and raise
``engine.replicas``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragengine import formats
from ragengine.index import disk
from ragengine.index.places import chunk_places
from ragengine.index.state import IndexState
from ragengine.stores.base import ChunkWrite, DocumentRace, DocWrite, StoreAdapter

BATCH_DOCS = 200


@dataclass
class MigrationReport:
    indexes: dict[str, dict] = field(default_factory=dict)

    def add(self, index: str, key: str, n: int = 1) -> None:
        counts = self.indexes.setdefault(index, {"documents": 0, "chunks": 0, "skipped": 0, "conflicts": 0})
        counts[key] += n


def _books(data_dir: Path) -> dict[str, dict]:
    folder = Path(data_dir) / "versions"
    books = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return {b["name"]: b for b in books}


def faiss_indexes(data_dir: Path) -> Iterator[tuple[str, Path, int]]:
    """(name, folder, dim) of every index under ``data_dir``: each index's live version (the folder of an
    index made before versions is its only one); other versions, hidden and trash folders skipped."""
    root = disk.index_root(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{data_dir} has no indexes/ folder: is it an engine data directory?")
    formats.read_data_version(data_dir)  # a folder a newer engine wrote is refused (FormatRefused), not guessed at
    live = {_live(b)["physical"]: name for name, b in _books(data_dir).items()}
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        meta = json.loads((path / "index.json").read_text(encoding="utf-8"))
        physical = meta["name"]
        if physical in live:
            yield live[physical], path, int(meta["dim"])
        elif disk.VERSION_SEP not in physical and physical not in _books(data_dir):
            yield physical, path, int(meta["dim"])


def _live(book: dict) -> dict:
    return next(v for v in book["versions"] if v["version"] == book["live"])


def _book_for(data_dir: Path, name: str, dim: int, config: dict) -> dict | None:
    """The version book the target gets: version 1 under the index's name, with the live version's model."""
    from ragengine.versions import book as bk

    found = _books(data_dir).get(name)
    model = _live(found)["model"] if found else None
    if model is None:
        return None  # made before versions: the target engine adopts it with its own model when dimensions agree
    return bk.new_book(name, model, dim, config, time.time()).to_dict()


def doc_batches(state: IndexState) -> Iterator[tuple[list[DocWrite], np.ndarray]]:
    """A loaded index's documents with their chunks and stored vectors, ``BATCH_DOCS`` at a time."""
    vectors = state.store.vectors()
    batch: list[DocWrite] = []
    slots: list[int] = []
    for rec in state.docs.values():
        places = chunk_places(rec.text, rec.metadata, rec.spans if rec.spans is not None else [(0, len(rec.text))])
        chunks = [ChunkWrite(i, rec.chunk_text(i), tokens=rec.chunk_tokens(i), place=places[i] or None)
                  for i in range(len(rec.slots))]
        batch.append(DocWrite(rec.doc_id, rec.text, rec.metadata, chunks))
        slots.extend(rec.slots)
        if len(batch) >= BATCH_DOCS:
            yield batch, np.array(vectors[np.asarray(slots, dtype=np.int64)], dtype=np.float32)
            batch, slots = [], []
    if batch:
        yield batch, np.array(vectors[np.asarray(slots, dtype=np.int64)], dtype=np.float32)


def migrate(data_dir: Path, target: StoreAdapter, *, only: list[str] | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> MigrationReport:
    report = MigrationReport()
    target.open()
    for name, path, dim in faiss_indexes(data_dir):
        if only and name not in only:
            continue
        _, state = disk.load_index_dir(path, dim, {"hnsw_threshold": 1 << 62})
        state.journal.close()
        config = state.config.to_dict()
        book = _book_for(data_dir, name, dim, config)
        if book is not None:
            target.book_update(name, lambda cur, b=book: cur or b)  # type: ignore[misc]
        done = 0
        for docs, vectors in doc_batches(state):
            _write(target, name, config, docs, vectors, report)
            done += len(docs)
            if progress:
                progress(name, done, state.n_docs)
    return report


def _write(target: StoreAdapter, name: str, config: dict, docs: list[DocWrite], vectors: np.ndarray,
           report: MigrationReport) -> None:
    held = target.get_documents(name, [d.doc_id for d in docs])
    fresh: list[DocWrite] = []
    rows: list[int] = []
    offset = 0
    for doc in docs:
        n = len(doc.chunks)
        if doc.doc_id in held:
            report.add(name, "skipped" if held[doc.doc_id].text == doc.text else "conflicts")
        else:
            fresh.append(doc)
            rows.extend(range(offset, offset + n))
        offset += n
    if not fresh:
        return
    try:
        target.write(name, config, [], fresh, vectors[rows], add_only=True, dim=int(vectors.shape[1]))
    except DocumentRace as exc:  # written meanwhile by someone else with other text: one by one
        raise RuntimeError(f"index '{name}': document '{exc.doc_id}' changed in the target during migration") from exc
    report.add(name, "documents", len(fresh))
    report.add(name, "chunks", len(rows))
