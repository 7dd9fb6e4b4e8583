"""Where an index lives on disk and how it is restored.

``<data_dir>/indexes/<quoted name>/``: ``index.json`` (name, dimension, chunking config),
``journal.log`` (writes since the snapshot) and ``snapshot/`` (see snapshot.py). Restoring = newest
valid snapshot + journal replay; any failure raises ``IndexLoadError`` with a message for the logs and
``/health``, and the index stays unloaded rather than half-loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from ragengine.errors import BadRequest, Conflict
from ragengine.index.journal import Journal, JournalCorrupt, fsync_dir
from ragengine.index.snapshot import SnapshotError, read_manifest, read_snapshot
from ragengine.index.state import IndexState
from ragengine.index.types import ChunkingConfig
from ragengine.protocol import names

INDEXES = "indexes"
PERSIST = "persist"  # /persist and /load copies
MAX_QUOTED_NAME = names.MAX_QUOTED_INDEX_NAME


class IndexLoadError(Exception):
    pass


def unloadable(name: str, why: str) -> Conflict:
    """The 409 of an index whose folder could not be loaded (``why``: the ``IndexLoadError``'s message)."""
    return Conflict(f"Index '{name}' could not be loaded from disk: {why}. "
                    f"Delete it (DELETE /indexes/{name}) or restore its files.")


VERSION_SEP = "/"  # index versions after the first live under "<name>/v<n>" (ragengine.versions.book)


def validate_physical(name: str) -> str:
    """An index's own name, or an index version's ("<name>/v<n>", "<name>/import-<id>"): what the stores hold."""
    base, sep, rest = name.partition(VERSION_SEP)
    validate_name(base)
    if sep and not (rest and rest.replace("-", "").isalnum() and len(rest) <= 64):
        raise BadRequest(f"Invalid index version name {name!r}.")
    return name


def validate_name(name: str) -> str:
    """An index's name (the rules are ``protocol.names.index_name``, which every request passes first)."""
    return names.index_name(name)


def dir_name(name: str) -> str:
    return names.folder_name(name)


def index_root(data_dir: Path) -> Path:
    return Path(data_dir) / INDEXES


def persist_path(data_dir: Path, name: str) -> Path:
    """``<data_dir>/persist/<name>``, where ``/persist`` writes and ``/load`` reads: ``name`` is one
    folder name (no ``/``, no dot files, not a snapshot's own ``.tmp`` / ``.old``), so a copy can
    never land on the engine's other files (``sessions.db``, the model cache, ``uploads/``: issue 22)."""
    if (not name or name.strip() != name or any(ord(c) < 32 or c == "\x7f" for c in name) or "/" in name
            or "\\" in name or name.startswith(".") or name.endswith((".tmp", ".old"))):
        raise BadRequest(f"Invalid path {name!r}: give a folder name under {PERSIST}/ (one name: no '/', "
                         "not starting with '.', not ending in '.tmp' or '.old').")
    if len(name.encode()) > MAX_QUOTED_NAME:
        raise BadRequest(f"Invalid path: at most {MAX_QUOTED_NAME} bytes.")
    root = Path(data_dir) / PERSIST
    target = root / name
    if root.is_symlink() or target.is_symlink():
        raise BadRequest(f"Invalid path {name!r}: {PERSIST}/ and its folders may not be symbolic links.")
    return target


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def create_index_dir(data_dir: Path, state: IndexState) -> Path:
    path = index_root(data_dir) / dir_name(state.name)
    path.mkdir(parents=True, exist_ok=True)
    fsync_dir(path.parent)
    write_json_atomic(path / "index.json", {"name": state.name, "dim": state.dim, "config": state.config.to_dict()})
    return path


def remove_dir(path: Path) -> None:
    """Delete an index folder: rename it aside first (atomic), then remove the files."""
    if not path.exists():
        return
    trash = path.with_name(f".trash-{uuid.uuid4().hex}")
    os.replace(path, trash)
    fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


def clean_trash(data_dir: Path) -> None:
    root = index_root(data_dir)
    if root.exists():
        for entry in root.iterdir():
            if entry.name.startswith(".trash-"):
                shutil.rmtree(entry, ignore_errors=True)


def snapshot_seq(path: Path) -> int | None:
    """The sequence number of an index folder's snapshot (``snapshot.old`` between the two renames of a
    swap); None when it has none or it cannot be read now."""
    for name in ("snapshot", "snapshot.old"):
        try:
            return int(read_manifest(path / name)["seq"])
        except (SnapshotError, KeyError, TypeError, ValueError):
            continue
    return None


def load_index_dir(path: Path, dim: int | None, store_kwargs: dict, repair: bool = True) -> tuple[str, IndexState]:
    """Restore one index folder (runs in a worker thread at start-up); ``dim`` None: its own dimension
    (index.json), as each index version has its model's. ``repair=False`` (a stand-by's read of a folder
    another process writes): a torn journal tail is left as it is, nothing is written."""
    try:
        meta = json.loads((path / "index.json").read_text(encoding="utf-8"))
        name = meta["name"]
    except (OSError, ValueError, KeyError) as exc:
        raise IndexLoadError(f"{path}: index.json missing or unreadable ({exc})") from exc
    dim = int(meta.get("dim") or 0) if dim is None else dim
    try:
        snap = path / "snapshot"
        if not snap.exists() and (path / "snapshot.old").exists():
            snap = path / "snapshot.old"  # crash between the two renames of a snapshot swap
        if snap.exists():
            state = read_snapshot(snap, name, dim, store_kwargs)
        else:
            if meta.get("dim") != dim:
                raise SnapshotError(f"{path}: index has dimension {meta.get('dim')}, the embedding model {dim}")
            state = IndexState(name, dim, ChunkingConfig.from_dict(meta.get("config")), store_kwargs)
        journal = Journal(path / "journal.log", dim)
        for record in journal.read(repair):
            if record.seq <= state.seq:
                continue  # already in the snapshot (crash before the journal was reset)
            state.apply(record.op, record.vectors)
            state.seq = record.seq
    except (SnapshotError, JournalCorrupt) as exc:
        raise IndexLoadError(str(exc)) from exc
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise IndexLoadError(f"{path}: inconsistent data ({exc})") from exc
    state.journal = journal
    return name, state
