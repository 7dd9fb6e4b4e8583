"""Append-only write-ahead journal, one file per index.

Record = header ``<4s I I Q>`` (magic ``RGJ1``, payload length, CRC32 of seq+payload, sequence number)
then the payload: ``u32`` JSON length, the JSON (op description), then raw float32 vectors. Every
append is fsync'ed before the write is acknowledged. Reading stops cleanly at a torn tail (a crash
mid-append: short header, short payload, or a bad checksum on the very last record), which is
truncated away; a bad record followed by more data is corruption and raises ``JournalCorrupt``. A
stand-by reads another live process's journal with ``repair=False``: a torn tail there may be the
append under way, so it is left as it is.
Only JSON and raw floats are ever decoded: no pickle, no eval.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragengine import formats

log = logging.getLogger(__name__)

MAGIC = b"RGJ%d" % formats.JOURNAL.current  # each record's magic carries the journal format's version
HEADER = struct.Struct("<4sIIQ")
MAX_RECORD = 1 << 31


class JournalCorrupt(Exception):
    pass


@dataclass
class Record:
    seq: int
    op: dict
    vectors: np.ndarray | None


def encode_parts(seq: int, op: dict, vectors: np.ndarray | None) -> list:
    """The record as buffers (header, JSON, vectors) without concatenating the large vector block."""
    meta = json.dumps(op, ensure_ascii=False, separators=(",", ":")).encode()
    parts: list[bytes] = [struct.pack("<I", len(meta)) + meta]
    if vectors is not None and len(vectors):
        parts.append(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
    crc = zlib.crc32(struct.pack("<Q", seq))
    for part in parts:
        crc = zlib.crc32(part, crc)
    length = sum(len(p) for p in parts)
    return [HEADER.pack(MAGIC, length, crc, seq), *parts]


def encode(seq: int, op: dict, vectors: np.ndarray | None) -> bytes:
    return b"".join(bytes(p) for p in encode_parts(seq, op, vectors))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _refuse_newer(path: Path, magic: bytes, offset: int) -> None:
    """A record of a later journal format (``RGJ<n>``, n above this engine's) is refused naming both versions."""
    if magic[:3] == MAGIC[:3] and magic[3:].isdigit():
        try:
            formats.JOURNAL.check(int(magic[3:]), f"{path} (record at byte {offset})")
        except formats.FormatRefused as exc:
            raise JournalCorrupt(str(exc)) from exc


class Journal:
    def __init__(self, path: Path, dim: int) -> None:
        self.path = path
        self.dim = dim
        self._fh: Any = None

    def open(self) -> None:
        new = not self.path.exists()
        self._fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 - held open for appends until close()
        if new:
            os.fsync(self._fh.fileno())
            fsync_dir(self.path.parent)

    @property
    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def append(self, seq: int, op: dict, vectors: np.ndarray | None) -> None:
        """Write and fsync one record (runs in a worker thread)."""
        if self._fh is None:
            self.open()
        parts = encode_parts(seq, op, vectors)
        offset = self._fh.seek(0, os.SEEK_END)
        try:
            for part in parts:
                view = memoryview(part)
                while view:  # unbuffered file: write() may be partial
                    view = view[self._fh.write(view):]
            os.fsync(self._fh.fileno())
        except BaseException:
            # Never leave half a record in front of the next one (that would read as corruption).
            self._fh.truncate(offset)
            raise

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def reset(self) -> None:
        """Start an empty journal (after a snapshot covered every record): write-then-rename."""
        self.close()
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self.open()

    def read(self, repair: bool = True) -> Iterator[Record]:
        """Yield every complete record; truncate a torn tail (``repair=False``: stop there, write nothing);
        raise JournalCorrupt on damage."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size  # this file's: another process may rename a new journal in
            offset = 0
            while offset < size:
                header = fh.read(HEADER.size)
                if len(header) < HEADER.size:
                    self._torn(offset, "short header", repair)
                    return
                magic, length, crc, seq = HEADER.unpack(header)
                end = offset + HEADER.size + length
                if magic != MAGIC or length > MAX_RECORD:
                    if magic == b"\0\0\0\0" and not fh.read().strip(b"\0"):
                        self._torn(offset, "zero-filled tail", repair)
                        return
                    _refuse_newer(self.path, magic, offset)
                    raise JournalCorrupt(f"{self.path}: bad record header at byte {offset}")
                body = fh.read(length)
                if len(body) < length:
                    self._torn(offset, "short record", repair)
                    return
                if zlib.crc32(struct.pack("<Q", seq) + body) != crc:
                    if end >= size:
                        self._torn(offset, "checksum mismatch in the last record", repair)
                        return
                    raise JournalCorrupt(f"{self.path}: checksum mismatch in record {seq} at byte {offset}")
                (meta_len,) = struct.unpack_from("<I", body)
                try:
                    op = json.loads(body[4 : 4 + meta_len])
                except ValueError as exc:
                    raise JournalCorrupt(f"{self.path}: unreadable record {seq} at byte {offset}") from exc
                raw = body[4 + meta_len :]
                if len(raw) % (4 * self.dim):
                    raise JournalCorrupt(f"{self.path}: record {seq} holds vectors of the wrong dimension")
                vectors = np.frombuffer(raw, dtype="<f4").reshape(-1, self.dim).astype(np.float32) if raw else None
                yield Record(seq, op, vectors)
                offset = end

    def _torn(self, offset: int, why: str, repair: bool) -> None:
        if not repair:
            return
        log.warning("%s: dropping a torn record at byte %d (%s): the write was never acknowledged",
                    self.path, offset, why)
        with open(self.path, "r+b") as fh:
            fh.truncate(offset)
            os.fsync(fh.fileno())
