"""The portable export of an index: one gzip file, streamed both ways, checked end to end. Pure (bytes in,
bytes out), so the API, the CLI and the tests share it.

Layout: a gzip member (RFC 1952) whose header carries its own CRC16 (FHCRC), so every bit that carries data
is covered (header: CRC16; compressed data: deflate's structure and the CRC32 and length in the trailer; the
only bits no check sees are the padding after deflate's last block, which no reader uses). Inside, JSON
lines:

1. the header: ``{"format": "ragengine-index-export", "version": 1, "index", "chunking", "embedding": {"key",
   "model", "url", "dim"}, "created_at"}``;
2. one line per document: ``{"id", "text", "meta", "spans", "tokens"?, "vectors"}``: ``spans`` as the engine
   stores them (``[start, end]`` into the text, or a chunk's own text), ``vectors`` the chunks' float32
   vectors, little-endian, base64 (bit for bit what the store held);
3. the trailer: ``{"end": true, "documents", "chunks", "sha256"}``, the SHA-256 of every line before it.

``ArchiveReader`` refuses, with ``ArchiveError`` (a 400), a file that is not gzip, damaged anywhere
(a flipped byte), truncated (no end of stream, or no trailer), of another format or of a newer version (both
versions named: ragengine.formats), with data after the trailer, or whose counts or SHA-256 do not match. The
importer writes into a hidden index and makes it visible only after ``finish()`` passed, so nothing is ever half
imported.

The SHA-256 proves the file whole, not who made it: an import is a write like ``POST /index``, and each
document line is checked as ``/index`` checks a document (issue 41): a non-empty id of at most 512
characters, used once in the file; a non-empty text of at most ``max_chars`` characters (413 beyond, as
``/index``); metadata an object; spans inside the text; token counts one per chunk; finite vectors. The
file is decompressed a bounded step at a time (``STEP`` bytes of output), and a line longer than any valid
document can be (``line_limit``) is refused as soon as it is, so a small file that inflates to gigabytes
costs at most a line's worth of memory.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import numpy as np

from ragengine import formats
from ragengine.errors import BadRequest, PayloadTooLarge
from ragengine.index.documents import MAX_DOC_ID

FORMAT = formats.EXPORT.name
VERSION = formats.EXPORT.current
MAX_LINE = 256 * 1024 * 1024  # one document's line (its text and vectors); beyond it the file is refused
STEP = 1024 * 1024  # decompressed bytes per step: what one step of a gzip bomb can cost
# gzip header: magic, deflate, FHCRC set, no mtime, no extra flags, OS unknown; then its CRC16.
_HEADER = b"\x1f\x8b\x08\x02\x00\x00\x00\x00\x00\xff"


class ArchiveError(BadRequest):
    pass


def line_limit(max_chars: int, max_body_bytes: int) -> int:
    """The longest document line a valid export can have: its text (at most 4 UTF-8 bytes a character), and
    everything else (id, metadata, spans, token counts, vectors) within what one ``/index`` request may hold."""
    return 4 * max_chars + max_body_bytes


def header(index: str, chunking: dict, embedding: dict, created_at: float) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "index": index, "chunking": chunking, "embedding": embedding,
            "created_at": created_at}


def _doc_line(doc: dict) -> dict[str, Any]:
    vectors = np.ascontiguousarray(doc["vectors"], dtype="<f4")
    line = {"id": doc["id"], "text": doc["text"], "meta": doc["meta"], "spans": doc["spans"],
            "vectors": base64.b64encode(vectors.tobytes()).decode("ascii")}
    if doc.get("tokens"):
        line["tokens"] = doc["tokens"]
    return line


class ArchiveWriter:
    """Feed the header, then batches of documents; each call returns the compressed bytes ready to send."""

    def __init__(self, level: int = 6) -> None:
        self._z = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._crc = 0
        self._size = 0
        self._sha = hashlib.sha256()
        self.documents = 0
        self.chunks = 0
        self._started = False

    def _line(self, obj: dict, *, hashed: bool = True) -> bytes:
        raw = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        if hashed:
            self._sha.update(raw)
        self._crc = zlib.crc32(raw, self._crc)
        self._size += len(raw)
        return self._z.compress(raw)

    def start(self, head: dict) -> bytes:
        self._started = True
        return _HEADER + struct.pack("<H", zlib.crc32(_HEADER) & 0xFFFF) + self._line(head)

    def documents_batch(self, docs: Iterable[dict]) -> bytes:
        out = []
        for doc in docs:
            out.append(self._line(_doc_line(doc)))
            self.documents += 1
            self.chunks += len(doc["spans"])
        return b"".join(out)

    def finish(self) -> bytes:
        end = {"end": True, "documents": self.documents, "chunks": self.chunks, "sha256": self._sha.hexdigest()}
        tail = self._line(end, hashed=False) + self._z.flush()
        return tail + struct.pack("<II", self._crc, self._size & 0xFFFFFFFF)


async def encode(head: dict, batches: AsyncIterator[list[dict]]) -> AsyncIterator[bytes]:
    writer = ArchiveWriter()
    yield writer.start(head)
    async for batch in batches:
        data = writer.documents_batch(batch)
        if data:
            yield data
    yield writer.finish()


class ArchiveReader:
    """Feed the file's bytes as they arrive; each ``feed`` returns the documents completed so far (dicts with
    ``vectors`` as a float32 array). ``header`` is set once read; ``finish()`` checks the end."""

    def __init__(self, max_line: int = MAX_LINE, max_chars: int | None = None) -> None:
        self._z = zlib.decompressobj(31)
        self._buf = bytearray()
        self._scanned = 0  # _buf[:_scanned] holds no newline
        self._sha = hashlib.sha256()
        self.max_line = max_line
        self.max_chars = max_chars  # a document's text, in characters (None: unchecked, as the CLI's download)
        self._ids: set[str] = set()
        self.header: dict | None = None
        self.trailer: dict | None = None
        self.documents = 0
        self.chunks = 0

    def feed(self, data: bytes) -> list[dict]:
        """Every document ``data`` completes (``batches`` yields them a bounded step at a time)."""
        return [doc for batch in self.batches(data) for doc in batch]

    def batches(self, data: bytes) -> Iterator[list[dict]]:
        """The documents ``data`` completes, in batches of at most ``STEP`` decompressed bytes each."""
        if self._z.eof:
            if data:
                raise ArchiveError("Import refused: the file has data after the end of its compressed stream.")
            return
        pending = data
        while True:
            try:
                raw = self._z.decompress(pending, STEP)
            except zlib.error as exc:
                raise ArchiveError(f"Import refused: the file is damaged or not a ragengine export ({exc}).") from None
            pending = self._z.unconsumed_tail
            if self._z.unused_data:
                raise ArchiveError("Import refused: the file has data after the end of its compressed stream.")
            self._buf += raw
            out = self._lines()
            if out:
                yield out
            if self._z.eof or (not pending and len(raw) < STEP):
                return  # a full step may leave output inside zlib even with no input left: drained above

    def _lines(self) -> list[dict]:
        out: list[dict] = []
        while True:
            end = self._buf.find(b"\n", self._scanned)
            if end < 0:
                self._scanned = len(self._buf)
                if len(self._buf) > self.max_line:
                    raise ArchiveError(f"Import refused: a line longer than {self.max_line} bytes (more than any "
                                       "valid document needs).")
                return out
            if end + 1 > self.max_line:
                raise ArchiveError(f"Import refused: a line longer than {self.max_line} bytes (more than any valid "
                                   "document needs).")
            line = bytes(self._buf[: end + 1])
            del self._buf[: end + 1]
            self._scanned = 0
            doc = self._line(line)
            if doc is not None:
                out.append(doc)

    def _line(self, line: bytes) -> dict | None:
        if self.trailer is not None:
            raise ArchiveError("Import refused: the file has data after its trailer.")
        try:
            obj = json.loads(line)
        except ValueError:
            raise ArchiveError("Import refused: the file is damaged (a line is not valid JSON).") from None
        if not isinstance(obj, dict):
            raise ArchiveError("Import refused: the file is damaged (a line is not a JSON object).")
        if self.header is None:
            if obj.get("format") != FORMAT:
                raise ArchiveError(f"Import refused: not a ragengine index export (format {obj.get('format')!r}).")
            try:  # every version up to this engine's is read; a newer one names both
                formats.EXPORT.check(obj.get("version"), "the file", advice=formats.NEWER_FILE)
            except formats.FormatRefused as exc:
                raise ArchiveError(f"Import refused: {exc}.") from None
            emb = obj.get("embedding")
            if not isinstance(emb, dict) or not isinstance(emb.get("dim"), int) or not isinstance(obj.get("chunking"), dict):
                raise ArchiveError("Import refused: the export's header lacks its embedding model or chunking.")
            self._sha.update(line)
            self.header = obj
            return None
        if obj.get("end") is True:
            if obj.get("sha256") != self._sha.hexdigest():
                raise ArchiveError("Import refused: the file is damaged (its SHA-256 does not match its content).")
            if obj.get("documents") != self.documents or obj.get("chunks") != self.chunks:
                raise ArchiveError("Import refused: the file's document or chunk count does not match its content.")
            self.trailer = obj
            return None
        self._sha.update(line)
        return self._doc(obj)

    def _doc(self, obj: dict) -> dict:
        assert self.header is not None
        dim = self.header["embedding"]["dim"]
        n = self.documents + 1
        try:
            doc_id, text, meta, spans = obj["id"], obj["text"], obj["meta"], obj["spans"]
            raw = base64.b64decode(obj["vectors"], validate=True)
        except (KeyError, ValueError, TypeError):
            raise ArchiveError(f"Import refused: document line {n} is incomplete.") from None
        if not (isinstance(doc_id, str) and isinstance(text, str) and isinstance(meta, dict) and isinstance(spans, list)
                and spans and len(raw) == 4 * dim * len(spans)):
            raise ArchiveError(f"Import refused: document line {n} does not fit the header "
                               f"({len(spans) if isinstance(spans, list) else '?'} chunks, {dim}-dimensional vectors).")
        self._check(n, doc_id, text, spans, obj.get("tokens"))
        vectors = np.frombuffer(raw, dtype="<f4").reshape(len(spans), dim).astype(np.float32)
        if not np.isfinite(vectors).all():
            raise ArchiveError(f"Import refused: document line {n} ({doc_id!r}) has a vector that is not finite.")
        self._ids.add(doc_id)
        self.documents += 1
        self.chunks += len(spans)
        return {"id": doc_id, "text": text, "meta": meta, "spans": spans, "tokens": obj.get("tokens"), "vectors": vectors}

    def _check(self, n: int, doc_id: str, text: str, spans: list, tokens: Any) -> None:
        """A document line as ``POST /index`` checks a document, and its chunks as the store will read them."""
        where = f"Import refused: document line {n}"
        if not doc_id or len(doc_id) > MAX_DOC_ID:
            raise ArchiveError(f"{where}: doc_id must be a non-empty string of at most {MAX_DOC_ID} characters.")
        if doc_id in self._ids:
            raise ArchiveError(f"{where}: doc_id {doc_id!r} appears twice in the file.")
        if not text.strip():
            raise ArchiveError(f"{where} ({doc_id!r}): document text cannot be empty.")
        if self.max_chars is not None and len(text) > self.max_chars:
            raise PayloadTooLarge(f"{where} ({doc_id!r}): text has {len(text)} characters; the limit is "
                                  f"{self.max_chars}.")
        for span in spans:
            if isinstance(span, str) and span:
                continue
            if not (isinstance(span, list) and len(span) == 2 and all(type(x) is int for x in span)
                    and 0 <= span[0] < span[1] <= len(text)):
                raise ArchiveError(f"{where} ({doc_id!r}): a chunk span is not [start, end] inside the text, nor a "
                                   f"chunk's own text: {str(span)[:80]}.")
        if tokens is not None and not (isinstance(tokens, dict) and all(
                isinstance(k, str) and isinstance(v, list) and len(v) == len(spans)
                and all(type(x) is int and x >= 0 for x in v) for k, v in tokens.items())):
            raise ArchiveError(f"{where} ({doc_id!r}): token counts must map a tokenizer to one count per chunk.")

    def finish(self) -> dict:
        """The trailer, once the whole file checked out; else why it is refused."""
        if not self._z.eof:
            raise ArchiveError("Import refused: the file is truncated (its compressed stream does not end).")
        if self._buf.strip():
            raise ArchiveError("Import refused: the file ends in the middle of a line.")
        if self.header is None or self.trailer is None:
            raise ArchiveError("Import refused: the file is truncated (no trailer).")
        return self.trailer
