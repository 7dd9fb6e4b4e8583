"""Where uploaded files wait for ingestion, and how a worker takes the next one.

Two queues behind one interface, picked by the session store's database (``make_jobs``):

- ``LocalJobs`` (SQLite, the embedded single-pod default): the bytes in ``<data_dir>/uploads/<file_id>``,
  the ids in an in-process ``asyncio.Queue``; at start, files left ``uploaded`` or ``processing`` by a
  crash are queued again. One process owns the database file, so nothing else can take a job.
- ``DatabaseJobs`` (PostgreSQL, shared by replicas): the bytes in ``conv_file_blobs``, written in the
  same transaction as the file's row, and the job is the row itself. A worker claims the oldest open
  job with ``FOR UPDATE SKIP LOCKED`` and a lease (``ingestion_lease_s``), which it renews while it
  works; every update it makes is guarded by its claim. A replica killed with ``-9`` (or cut off from
  the database) stops renewing, its lease runs out and another replica takes the job, which re-runs
  from the start (document ids are deterministic, so a re-run replaces, never duplicates).

Why a lease rather than holding the row lock for the whole ingestion: a transaction kept open for
minutes pins a pooled connection and the vacuum horizon, blocks the job's own progress updates (which
come from other connections), and after a node loss, unlike a process kill, PostgreSQL only notices
the dead connection when TCP keepalive gives up (hours by default). A lease is short transactions
only, and expires on the database's clock whatever happened to the holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from ragengine.conversations.file_records import ACTIVE_FILE_STATUSES
from ragengine.conversations.store import FileInfo, SessionStore
from ragengine.index.journal import fsync_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """A job a worker holds: ``owner`` guards its updates (None: the local queue, nobody else can take it)."""

    file_id: str
    owner: str | None = None
    attempts: int = 1


class Jobs(Protocol):
    shared: bool
    lease_s: float

    async def start(self) -> None: ...
    async def submit(self, *, filename: str, content_type: str, text: str | None, data: bytes,
                     size_bytes: int | None = None, principal: str | None = None, purpose: str | None = None,
                     expires_at: datetime | None = None, quota: int | None = None) -> FileInfo: ...
    async def next(self) -> Claim: ...
    async def data(self, claim: Claim) -> bytes | None: ...
    async def renew(self, claim: Claim) -> bool: ...
    async def discard(self, file_id: str) -> None: ...
    async def pending(self) -> int: ...


class LocalJobs:
    """One process's queue: bytes on the data volume, ids in memory (exactly the single-pod behaviour)."""

    shared = False
    lease_s = 0.0

    def __init__(self, store: SessionStore, data_dir: Path) -> None:
        self.store = store
        self.dir = Path(data_dir) / "uploads"
        self.queue: asyncio.Queue[str] = asyncio.Queue()

    def _path(self, file_id: str) -> Path:
        return self.dir / file_id

    async def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for status in reversed(ACTIVE_FILE_STATUSES):  # processing first: those were started before
            for f in await self.store.list_files(status=status, limit=100_000):
                log.info("re-queueing %s file %s after restart", status, f.id)
                self.queue.put_nowait(f.id)

    async def submit(self, *, filename: str, content_type: str, text: str | None, data: bytes,
                     size_bytes: int | None = None, principal: str | None = None, purpose: str | None = None,
                     expires_at: datetime | None = None, quota: int | None = None) -> FileInfo:
        """``data``: what the worker needs (the parsed parts); ``size_bytes``: the upload's own size;
        ``quota``: the bytes of files its principal may hold (413 beyond, nothing stored)."""
        info = await self.store.create_file(filename=filename, content_type=content_type,
                                            size_bytes=len(data) if size_bytes is None else size_bytes, text=text,
                                            principal=principal, purpose=purpose, expires_at=expires_at, quota=quota)
        await asyncio.to_thread(_write_durably, self._path(info.id), data)
        self.queue.put_nowait(info.id)
        return info

    async def next(self) -> Claim:
        return Claim(await self.queue.get())

    async def data(self, claim: Claim) -> bytes | None:
        try:
            return await asyncio.to_thread(self._path(claim.file_id).read_bytes)
        except FileNotFoundError:
            return None

    async def renew(self, claim: Claim) -> bool:
        return True

    async def discard(self, file_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(file_id).unlink()

    async def pending(self) -> int:
        return self.queue.qsize()


class DatabaseJobs:
    """The queue in PostgreSQL, shared by every replica on it: each job is taken by exactly one at a time."""

    shared = True

    def __init__(self, store: SessionStore, *, lease_s: float, poll_s: float) -> None:
        self.store = store
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.holder = f"{socket.gethostname()}/{os.getpid()}"  # in the owner, for whoever reads the table
        self._wake = asyncio.Event()

    async def start(self) -> None:
        """Nothing to re-queue: jobs left by a crash are open rows whose lease runs out by itself."""

    async def submit(self, *, filename: str, content_type: str, text: str | None, data: bytes,
                     size_bytes: int | None = None, principal: str | None = None, purpose: str | None = None,
                     expires_at: datetime | None = None, quota: int | None = None) -> FileInfo:
        info = await self.store.create_file(filename=filename, content_type=content_type,
                                            size_bytes=len(data) if size_bytes is None else size_bytes, text=text,
                                            data=data, principal=principal, purpose=purpose, expires_at=expires_at,
                                            quota=quota)
        self._wake.set()  # this replica's idle workers look at once; the others within poll_s
        return info

    async def next(self) -> Claim:
        while True:
            self._wake.clear()
            owner = f"{self.holder}/{uuid.uuid4().hex[:12]}"  # one per claim: a re-claim is a new owner
            try:
                claimed = await self.store.claim_job(owner, self.lease_s)
            except Exception as exc:  # the database is away: keep polling, the API reports it meanwhile
                log.warning("cannot claim ingestion jobs: %s", exc.__class__.__name__)
                claimed = None
            if claimed is not None:
                return Claim(claimed[0], owner, claimed[1])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)

    async def data(self, claim: Claim) -> bytes | None:
        return await self.store.file_data(claim.file_id)

    async def renew(self, claim: Claim) -> bool:
        assert claim.owner is not None, "a database claim always has an owner"
        return await self.store.renew_lease(claim.file_id, claim.owner, self.lease_s)

    async def discard(self, file_id: str) -> None:
        """The bytes go with the file's row (``delete_file``) or its last update (``drop_data``)."""

    async def pending(self) -> int:
        return await self.store.count_active_files()


def make_jobs(store: SessionStore, settings) -> Jobs:
    """PostgreSQL: the shared queue (replicas may run beside this one); SQLite: the local one."""
    if store.dialect == "postgresql":
        return DatabaseJobs(store, lease_s=settings.ingestion_lease_s, poll_s=settings.ingestion_poll_s)
    return LocalJobs(store, settings.data_dir)


def _write_durably(path: Path, data: bytes) -> None:
    """The upload's bytes and their folder entry on disk before the 202: the job re-queued after a crash or
    a power cut finds its input."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    fsync_dir(path.parent)
