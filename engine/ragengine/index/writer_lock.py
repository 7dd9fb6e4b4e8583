"""One engine process at a time writes a data folder's indexes.

A deleted or evicted pod's replacement starts while the old process is still stopping (the preStop
sleep, the drain, its final snapshot), and on one node both mount the same ReadWriteOnce volume. The
old process's last snapshot puts a fresh, empty journal in place (write, then rename), so a new process
that had already opened the journal would append its acknowledged writes to a file no longer on disk:
lost at its next restart. So an engine takes an exclusive ``flock`` on ``<data_dir>/indexes/.writer.lock``
before it writes anything there, and waits, saying who holds it, until the holder is gone; meanwhile it
serves reads as a stand-by (``ragengine.handover``, which asks ``busy()``). The kernel drops the lock of
a process that exits in any way (kill -9 included), so a crash never leaves it held.

Taking the lock writes nothing into the file until ``announce()``: the engine first checks, under the lock, that the
folder's format is one it reads (ragengine.formats), and an engine that refuses a newer folder leaves the lock file
exactly as it found it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

FILE = ".writer.lock"


class DataDirBusy(RuntimeError):
    """Another engine process kept the data folder past the wait."""


class WriterLock:
    def __init__(self, root: Path) -> None:
        self.path = Path(root) / FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> str:
        """What the holder wrote (its host, i.e. its pod's name, and pid), for the log and the error."""
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def busy(self) -> bool:
        """Whether another process holds the lock now; takes nothing and creates nothing (a stand-by asks)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no lock file: no engine ever wrote this folder, or it is not there yet
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also drops the lock if this probe took it
        return False

    async def acquire(self, timeout_s: float, poll_s: float = 0.05, report_every_s: float = 10.0, *,
                      announce: bool = True) -> None:
        """Take the lock, polling (the event loop keeps running) until ``timeout_s``; a log line every
        ``report_every_s`` while another process holds it. ``announce=False``: the holder line is written by
        ``announce()`` later (nothing is written before then)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        start = time.monotonic()
        next_report = start
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    waited = time.monotonic() - start
                    if waited >= timeout_s:
                        raise DataDirBusy(
                            f"another engine process ({self.holder()}) still holds {self.path} after {waited:.0f} s: "
                            "two engines must never write one data folder (a second replica on a FAISS volume, or "
                            "a process that does not stop); stop it, or raise writer_lock_timeout_seconds") from None
                    if time.monotonic() >= next_report:
                        log.warning("waiting for the engine process that holds %s (%s) to stop: %.0f s so far",
                                    self.path, self.holder(), waited)
                        next_report += report_every_s
                    await asyncio.sleep(poll_s)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if time.monotonic() - start >= poll_s:
            log.info("took %s after %.1f s", self.path, time.monotonic() - start)
        if announce:
            self.announce()

    def announce(self) -> None:
        """Write who holds the lock (read by a process waiting for it)."""
        assert self._fd is not None
        since = datetime.now(UTC).isoformat(timespec="seconds")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"host={socket.gethostname()} pid={os.getpid()} since={since}\n".encode(), 0)

    def release(self) -> None:
        """Give the folder up (at shutdown, after the last snapshot); closing the descriptor unlocks it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
