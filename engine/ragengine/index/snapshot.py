"""Index snapshots: a directory written to ``<dir>.tmp``, fsync'ed, then renamed into place.

Files: ``docs.jsonl`` (one JSON object per document: id, text, metadata, chunk spans, slots),
``vectors.faiss`` (the FAISS index, so restarts never re-embed and HNSW is not rebuilt),
``alive.bin`` (the tombstone mask) and ``manifest.json`` (format, sequence number, dimension,
chunking config, size and CRC32 of every file). A snapshot whose manifest is missing or whose files
fail their checksums is rejected as a whole: an index is never half-loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ragengine import formats
from ragengine.index.journal import fsync_dir
from ragengine.index.state import IndexState
from ragengine.index.types import ChunkingConfig, DocRecord, compact_spans

FORMAT = formats.SNAPSHOT.name
VERSION = formats.SNAPSHOT.current


class SnapshotError(Exception):
    pass


def _crc_file(path: Path) -> tuple[int, int]:
    crc, size = 0, 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def write_snapshot(state: IndexState, target: Path, extra: dict | None = None) -> None:
    """Write ``state`` to directory ``target`` atomically (replacing an older one there)."""
    target = Path(target)
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    with open(tmp / "docs.jsonl", "w", encoding="utf-8") as fh:
        for rec in state.docs.values():
            spans = None if rec.spans is None else [list(s) if isinstance(s, tuple) else s for s in rec.spans]
            line = {"id": rec.doc_id, "text": rec.text, "meta": rec.metadata, "spans": spans, "slots": rec.slots}
            if rec.tokens:  # absent in snapshots written before token counts were stored: still readable
                line["tokens"] = rec.tokens
            fh.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
            fh.write("\n")
    state.store.write(str(tmp / "vectors.faiss"))
    np.ascontiguousarray(state.store.alive[: state.store.ntotal]).tofile(tmp / "alive.bin")
    files = {}
    for name in ("docs.jsonl", "vectors.faiss", "alive.bin"):
        _fsync_file(tmp / name)
        size, crc = _crc_file(tmp / name)
        files[name] = {"size": size, "crc32": crc}
    manifest = {"format": FORMAT, "version": VERSION, "name": state.name, "seq": state.seq, "dim": state.dim,
                "config": state.config.to_dict(), "kind": state.store.kind, "ntotal": state.store.ntotal,
                "documents": state.n_docs, "chunks": state.n_chunks, "files": files, **(extra or {})}
    with open(tmp / "manifest.json", "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    fsync_dir(tmp)
    old = target.with_name(target.name + ".old")
    if target.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(target, old)
    os.replace(tmp, target)
    fsync_dir(target.parent)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SnapshotError(f"{path}: no manifest.json (not a snapshot, or an unfinished one)") from exc
    except OSError as exc:  # a file where a folder should be, permissions
        raise SnapshotError(f"{path}: manifest.json unreadable ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise SnapshotError(f"{path}: manifest.json is not valid JSON") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise SnapshotError(f"{path}: manifest.json is not an index snapshot's (format {found!r})")
    try:
        formats.SNAPSHOT.check(manifest.get("version"), f"{path}/manifest.json")
    except formats.FormatRefused as exc:
        raise SnapshotError(str(exc)) from exc
    return manifest


def read_snapshot(path: Path, name: str, dim: int | None, store_kwargs: dict) -> IndexState:
    """Load and verify a snapshot directory into a fresh IndexState named ``name`` (``dim`` None: the
    snapshot's own dimension; an index version carries its model, checked by ``ragengine.versions``)."""
    path = Path(path)
    manifest = read_manifest(path)
    dim = int(manifest["dim"]) if dim is None else dim
    if manifest["dim"] != dim:
        raise SnapshotError(
            f"{path}: vectors have dimension {manifest['dim']} but the embedding model has {dim}; "
            "re-index with this model or configure the model the index was built with"
        )
    for fname, info in manifest["files"].items():
        if not (path / fname).exists():
            raise SnapshotError(f"{path}: {fname} is missing")
        size, crc = _crc_file(path / fname)
        if size != info["size"] or crc != info["crc32"]:
            raise SnapshotError(f"{path}: {fname} fails its checksum (damaged file)")
    state = IndexState(name, dim, ChunkingConfig.from_dict(manifest.get("config")), store_kwargs)
    alive = np.fromfile(path / "alive.bin", dtype=bool)
    try:
        state.store.load_index(str(path / "vectors.faiss"), alive)
    except Exception as exc:
        raise SnapshotError(f"{path}: vectors.faiss unreadable: {exc}") from exc
    if state.store.ntotal != manifest["ntotal"] or alive.size != manifest["ntotal"]:
        raise SnapshotError(f"{path}: vector count does not match the manifest")
    with open(path / "docs.jsonl", encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            try:
                d: Any = json.loads(line)
                spans = d["spans"] if d["spans"] is not None else [[0, len(d["text"])]]
                rec = DocRecord(d["id"], d["text"], d.get("meta") or {}, list(d["slots"]), compact_spans(d["text"], spans),
                                d.get("tokens"))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise SnapshotError(f"{path}: docs.jsonl line {line_no} unreadable") from exc
            if len(rec.slots) != len(spans) or any(not (0 <= s < state.store.ntotal) for s in rec.slots):
                raise SnapshotError(f"{path}: docs.jsonl line {line_no} points at vectors that do not exist")
            state.docs[rec.doc_id] = rec
            for i, (slot, words) in enumerate(zip(rec.slots, state.index_texts(rec), strict=True)):  # contextual chunk text
                state._set_slot(slot, rec, i)
                state.bm25.add(slot, words)
    state.seq = int(manifest["seq"])
    return state
