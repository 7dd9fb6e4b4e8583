"""How the embedded FAISS indexes survive a restart: one folder per index under ``data_dir``, a journal
written (fsync) before a change is applied, snapshots that empty the journal, flat → HNSW migration, and
the ``/persist`` / ``/load`` copies. The registry decides what changes; this module makes it durable.

A stand-by (``ragengine.handover``: a replacement process while the old one still holds the folder) loads
it with ``restore_read_only`` and then refuses every write here, whatever reached it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np

from ragengine import formats, metrics
from ragengine.errors import BadRequest, Conflict, EngineError, Unavailable
from ragengine.index import disk
from ragengine.index.journal import Journal
from ragengine.index.snapshot import SnapshotError, read_manifest, read_snapshot, write_snapshot
from ragengine.index.state import IndexState
from ragengine.index.writer_lock import WriterLock

log = logging.getLogger(__name__)
# A stand-by reads an index folder again when the writer swapped a snapshot in meanwhile (up to this often).
STABLE_READS = 20


class Durability:
    """The on-disk side of the embedded indexes; every method that writes runs its I/O in a thread."""

    def __init__(self, data_dir: Path, dim: int, store_kwargs: dict, snapshot_journal_bytes: int,
                 writer_lock_timeout_s: float) -> None:
        self.data_dir = data_dir
        self.dim = dim
        self.store_kwargs = store_kwargs
        # Snapshot once the journal passes this many bytes (0: only at shutdown and migrations).
        self.snapshot_journal_bytes = snapshot_journal_bytes
        # This process alone writes the folder from restore() to close() (index/writer_lock.py).
        self.writer = WriterLock(disk.index_root(data_dir))
        self.writer_lock_timeout_s = writer_lock_timeout_s
        self.read_only = False  # restore_read_only: another process writes the folder

    def dir(self, name: str) -> Path:
        return disk.index_root(self.data_dir) / disk.dir_name(name)

    # -- start / stop ------------------------------------------------------------------------------
    async def restore(self) -> tuple[list[IndexState], dict[str, str]]:
        """Every index folder: the indexes that loaded, and for the others (left untouched) why not. Waits
        first for any other engine process on the folder to stop."""
        root = disk.index_root(self.data_dir)
        # A folder a newer engine wrote is refused at once (even while that engine still holds it), with nothing written.
        await asyncio.to_thread(formats.read_data_version, self.data_dir)
        root.mkdir(parents=True, exist_ok=True)
        await self.writer.acquire(self.writer_lock_timeout_s, announce=False)
        try:  # again under the lock: a newer engine may have upgraded the folder while this one waited
            found = await asyncio.to_thread(formats.upgrade_data_dir, self.data_dir)
        except BaseException:
            self.writer.release()
            raise
        self.writer.announce()
        if found < formats.DATA.current:
            log.info("data folder %s upgraded in place from format %d to %d", self.data_dir, found, formats.DATA.current)
        await asyncio.to_thread(disk.clean_trash, self.data_dir)
        states, corrupt = [], {}
        for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                # Each index with its own dimension: index versions of several models live side by side.
                _name, state = await asyncio.to_thread(disk.load_index_dir, path, None, self.store_kwargs)
            except disk.IndexLoadError as exc:
                key = unquote(path.name)
                corrupt[key] = str(exc)
                log.error("index %r NOT loaded (corrupt data, left untouched on disk): %s", key, exc)
                continue
            states.append(state)
        return states, corrupt

    async def restore_read_only(self) -> tuple[list[IndexState], dict[str, str]]:
        """What ``restore`` loads, as it stands now, while another process holds the folder and writes it:
        no lock taken, no torn journal tail truncated (it may be the append under way), no trash cleaned,
        no journal opened; every write is refused from now on (``_writable``)."""
        self.read_only = True
        root = disk.index_root(self.data_dir)
        states: list[IndexState] = []
        corrupt: dict[str, str] = {}
        if not root.is_dir():
            return states, corrupt
        for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                state = await asyncio.to_thread(load_stable, path, self.store_kwargs)
            except disk.IndexLoadError as exc:
                corrupt[unquote(path.name)] = str(exc)
                log.error("index %r NOT loaded by the stand-by: %s", unquote(path.name), exc)
                continue
            state.journal = None  # never appended to: the writer's file
            states.append(state)
        return states, corrupt

    def _writable(self) -> None:
        if self.read_only:
            raise Unavailable("This engine is a stand-by: another engine process still writes its data folder. "
                              "Retry shortly; the write goes through once this one has taken the folder over.",
                              headers={"Retry-After": "1"})

    async def close(self, states: list[IndexState]) -> None:
        """Snapshot every index whose journal is not empty, so the next start replays nothing; then give
        the folder up to the next process. A stand-by's read-only load has nothing to write or give up."""
        if self.read_only:
            return
        try:
            for state in states:
                async with state.lock:
                    try:
                        if state.journal is not None and state.journal.size > 0:
                            await self.snapshot(state)
                    except Exception:
                        log.exception("snapshot of %r at shutdown failed; the journal will be replayed", state.name)
                    if state.journal is not None:
                        state.journal.close()
        finally:
            self.writer.release()

    # -- writes ------------------------------------------------------------------------------------
    async def create(self, state: IndexState) -> None:
        """The index's folder and an empty journal now (an index version exists before its first document)."""
        self._writable()
        if not state.on_disk:
            path = await asyncio.to_thread(disk.create_index_dir, self.data_dir, state)
            state.journal = Journal(path / "journal.log", state.dim)
            await asyncio.to_thread(state.journal.open)
            state.on_disk = True

    async def write(self, state: IndexState, op: dict, vectors: np.ndarray | None) -> None:
        """Journal (fsync) then apply; the caller holds ``state.lock``. A new index gets its folder first."""
        self._writable()
        if not state.on_disk:
            path = await asyncio.to_thread(disk.create_index_dir, self.data_dir, state)
            state.journal = Journal(path / "journal.log", state.dim)
            state.on_disk = True
        assert state.journal is not None
        journal = state.journal
        seq = state.seq + 1
        try:
            await asyncio.to_thread(journal.append, seq, op, vectors)
        except OSError as exc:
            raise EngineError(f"Could not write to the index journal: {exc}", status_code=507) from exc

        def apply() -> None:
            with state.rw.write():
                state.apply(op, vectors)
                state.seq = seq

        await asyncio.to_thread(apply)

    async def maintain(self, state: IndexState) -> None:
        """After a write: migrate to HNSW (then snapshot) when due, or snapshot a journal grown too long."""
        assert state.journal is not None
        if state.store.should_migrate():
            await self.migrate(state)
            await self.snapshot(state)
        elif 0 < self.snapshot_journal_bytes < state.journal.size:
            await self.snapshot(state)

    async def migrate(self, state: IndexState) -> None:
        """Flat → HNSW once the index outgrows hnsw_threshold; searches keep using flat meanwhile."""
        self._writable()
        def build() -> tuple[Any, np.ndarray]:
            with state.rw.read():
                vectors = np.array(state.store.vectors())
                alive = state.store.alive[: state.store.ntotal].copy()
            return state.store.build_hnsw(vectors), alive

        log.info("index %r has %d vectors: building HNSW", state.name, state.n_chunks)
        start = time.perf_counter()
        hnsw, alive = await asyncio.to_thread(build)

        def swap() -> None:
            with state.rw.write():
                state.store.replace(hnsw, alive)

        await asyncio.to_thread(swap)
        log.info("index %r now HNSW (built in %.1f s)", state.name, time.perf_counter() - start)

    async def snapshot(self, state: IndexState) -> None:
        """Compact when a fifth of the slots are tombstones, write the snapshot, empty the journal."""
        self._writable()
        assert state.journal is not None
        start = time.perf_counter()
        if state.tombstones() > max(1000, state.store.ntotal // 5):
            def compact() -> None:
                with state.rw.write():
                    state.compact()

            await asyncio.to_thread(compact)
        await asyncio.to_thread(write_snapshot, state, self.dir(state.name) / "snapshot")
        await asyncio.to_thread(state.journal.reset)
        metrics.SNAPSHOT_SECONDS.observe(time.perf_counter() - start)

    async def remove(self, name: str) -> None:
        self._writable()
        await asyncio.to_thread(disk.remove_dir, self.dir(name))

    # -- /persist and /load ------------------------------------------------------------------------
    def copy_path(self, name: str, path: str | None) -> Path:
        """Where ``/persist`` writes and ``/load`` reads: ``<data_dir>/persist/<path>``, ``path`` one folder
        name (default: the index's folder name)."""
        return disk.persist_path(self.data_dir, path or disk.dir_name(name))

    async def persist(self, state: IndexState, target: Path) -> None:
        self._writable()
        def write() -> None:
            if target.exists() or target.is_symlink():  # only an earlier copy may be replaced
                try:
                    if not target.is_dir():
                        raise SnapshotError("not a folder")
                    read_manifest(target)
                except SnapshotError as exc:
                    raise Conflict(f"{target.name} exists under {disk.PERSIST}/ and is not an index snapshot "
                                   f"({exc}); it is left as it is: choose another path") from exc
            target.parent.mkdir(parents=True, exist_ok=True)
            write_snapshot(state, target)

        await asyncio.to_thread(write)

    async def read_copy(self, source: Path, name: str) -> IndexState:
        try:
            return await asyncio.to_thread(read_snapshot, source, name, None, self.store_kwargs)
        except SnapshotError as exc:
            raise BadRequest(f"Loading failed: {exc}") from exc

    async def install(self, state: IndexState) -> None:
        """A loaded copy becomes a live index: its folder, a snapshot of it and an empty journal."""
        self._writable()
        path = await asyncio.to_thread(disk.create_index_dir, self.data_dir, state)
        await asyncio.to_thread(write_snapshot, state, path / "snapshot")
        state.journal = Journal(path / "journal.log", state.dim)
        await asyncio.to_thread(state.journal.reset)


def load_stable(path: Path, store_kwargs: dict, pause: Callable[[float], None] = time.sleep) -> IndexState:
    """One index folder as another process leaves it between two of its writes: loaded again while that
    process swapped a snapshot in meanwhile (the snapshot's sequence number changed, or a file went away
    under the read), so snapshot and journal always belong together. Runs in a worker thread."""
    error: Exception | None = None
    for _ in range(STABLE_READS):
        before = disk.snapshot_seq(path)
        try:
            _name, state = disk.load_index_dir(path, None, store_kwargs, repair=False)
        except (disk.IndexLoadError, OSError) as exc:
            error = exc
        else:
            if disk.snapshot_seq(path) == before:
                return state
        pause(0.05)
    raise disk.IndexLoadError(f"{path}: not readable while its writer works on it ({error or 'snapshots kept changing'})")
