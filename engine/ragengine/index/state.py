"""One index in memory: documents, chunk slots, FAISS vectors and BM25, plus the locks around them.

Writers are serialised by ``lock`` (asyncio, per index). The in-memory structures are also guarded by
``rw`` (a threading reader-writer lock) because searches and mutations run in worker threads: many
searches at once, a mutation alone. Mutations are short (the slow parts, chunking and embedding,
happen before them), so searches wait at most a few milliseconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import uuid
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ragengine.index.contextual import index_texts
from ragengine.index.documents import DocSearch
from ragengine.index.store import VectorStore
from ragengine.index.types import ChunkingConfig, DocRecord, compact_spans
from ragengine.retrieval import filters as flt
from ragengine.retrieval.bm25 import BM25Index

_NODE_NS = uuid.UUID("5f6c1c39-51a4-4f05-9f1b-8c4a3b7a2d10")
_NODE_NS_BYTES = _NODE_NS.bytes


class RWLock:
    """Readers share, a writer is alone; a waiting writer blocks new readers (no writer starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


_ACL_CLASSES = object()  # the mask cache's key for the slots grouped by document ACL


def node_id(doc_id: str, seq: int, text: str) -> str:
    """Stable node id: a UUID derived from the document, the chunk's position and its text, exactly
    ``str(uuid.uuid5(_NODE_NS, name))`` written out (a hundred per chat turn: uuid's objects cost more than
    the hash)."""
    h = hashlib.sha1(_NODE_NS_BYTES + f"{doc_id}\x00{seq}\x00{text}".encode()).hexdigest()
    # version 5 in the 13th digit, the RFC 4122 variant (binary 10) in the 17th
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


class IndexState:
    def __init__(self, name: str, dim: int, config: ChunkingConfig, store_kwargs: dict) -> None:
        self.name = name
        self.dim = dim
        self.config = config
        self.store_kwargs = store_kwargs
        self.store = VectorStore(dim, **store_kwargs)
        self.bm25 = BM25Index()
        self.docs: dict[str, DocRecord] = {}
        self.slot_doc: list[DocRecord | None] = []
        self.slot_seq = array("I")
        self.lock = asyncio.Lock()
        self.rw = RWLock()
        self.seq = 0  # last journal sequence number applied
        self.version = 0  # bumps on every mutation; keys the filter-mask cache
        self._mask_cache: dict[Any, tuple[int, np.ndarray]] = {}
        self.chunker: Any = None  # set by the registry (needs the embedder)
        self.journal: Any = None
        self.on_disk = False  # the index folder exists (created by the first committed write)

    # -- counts ------------------------------------------------------------------------------------
    @property
    def n_docs(self) -> int:
        return len(self.docs)

    @property
    def n_chunks(self) -> int:
        return self.store.n_alive

    # -- mutations (call under rw.write) -----------------------------------------------------------
    def apply(self, op: dict, vectors: np.ndarray | None) -> None:
        """Apply one journal op: ``{"delete": [doc_id], "add": [{"id","text","meta","spans"[,"tokens"]}]}``."""
        for doc_id in op.get("delete", ()):
            self._delete(doc_id)
        adds = op.get("add", ())
        if adds:
            n = sum(len(d["spans"]) for d in adds)
            if vectors is None or len(vectors) != n:
                raise ValueError(f"journal op has {n} chunks but {0 if vectors is None else len(vectors)} vectors")
            slots = self.store.add(vectors) if n else np.zeros(0, np.int64)
            pos = 0
            for d in adds:
                rec = DocRecord(d["id"], d["text"], d.get("meta") or {}, [], compact_spans(d["text"], d["spans"]),
                                d.get("tokens"))
                for i, words in enumerate(self.index_texts(rec)):  # contextual chunk text
                    slot = int(slots[pos])
                    pos += 1
                    rec.slots.append(slot)
                    self._set_slot(slot, rec, i)
                    self.bm25.add(slot, words)
                self.docs[rec.doc_id] = rec
        self.version += 1
        self._mask_cache.clear()

    def _set_slot(self, slot: int, rec: DocRecord, i: int) -> None:
        while len(self.slot_doc) <= slot:
            self.slot_doc.append(None)
            self.slot_seq.append(0)
        self.slot_doc[slot] = rec
        self.slot_seq[slot] = i

    def _delete(self, doc_id: str) -> None:
        rec = self.docs.pop(doc_id, None)
        if rec is None:
            return
        for slot, words in zip(rec.slots, self.index_texts(rec), strict=True):  # the text its postings were made from
            self.bm25.remove(slot, words)
            self.slot_doc[slot] = None
        self.store.remove(rec.slots)

    def doc_vectors(self, rec: DocRecord) -> np.ndarray:
        return np.array(self.store.vectors_at(rec.slots), dtype=np.float32)

    def tombstones(self) -> int:
        return self.store.ntotal - self.store.n_alive

    def compact(self) -> None:
        """Renumber slots densely, dropping deleted vectors (rebuilds FAISS and BM25)."""
        order: list[int] = []
        for rec in self.docs.values():
            order.extend(rec.slots)
        vectors = self.store.vectors_at(order) if order else np.zeros((0, self.dim), np.float32)
        # In the store's own format: an HNSW index read from disk keeps the compression it was built with.
        store = VectorStore.from_vectors(np.ascontiguousarray(vectors), dim=self.dim,
                                         **{**self.store_kwargs, "compression": self.store.compression})
        self.slot_doc, self.slot_seq = [], array("I")
        pos = 0
        for rec in self.docs.values():
            rec.slots = list(range(pos, pos + len(rec.slots)))
            for i, slot in enumerate(rec.slots):
                self._set_slot(slot, rec, i)
            pos += len(rec.slots)
        self.store = store
        self.bm25.rebuild((s, words) for r in self.docs.values() for s, words in zip(r.slots, self.index_texts(r), strict=True))
        self.version += 1
        self._mask_cache.clear()

    def index_texts(self, rec: DocRecord) -> list[str]:
        """Per chunk of ``rec``, the text embedded and keyword-indexed (with its title and section path
        when this index's chunking is contextual)."""
        return index_texts(rec.text, rec.metadata, rec.spans, contextual=self.config.contextual)

    # -- reads (call under rw.read) ----------------------------------------------------------------
    def allowed_mask(self, f: flt.Filter | None) -> np.ndarray | None:
        if f is None:
            return None
        cached = self._mask_cache.get(f)
        if cached and cached[0] == self.version:
            return cached[1]
        # A document ACL (ANDed in by access control) is masked by ACL class: one pass per index version
        # groups the slots by their document's acl, then each principal ORs the classes it is admitted to.
        # The rest of the filter, if any, is matched per document as before.
        parts = f.filters if isinstance(f, flt.Compound) and f.op == "and" else (f,)
        acls = [p for p in parts if isinstance(p, flt.Acl)]
        rest = [p for p in parts if not isinstance(p, flt.Acl)]
        masks = [self._acl_mask(acl) for acl in acls]  # only live documents' slots, as below
        if rest or not masks:
            other = rest[0] if len(rest) == 1 else flt.Compound("and", tuple(rest))
            matched = np.zeros(max(self.store.ntotal, 1), dtype=bool)
            for rec in self.docs.values():
                if flt.matches(other, rec.metadata):
                    matched[rec.slots] = True
            masks.append(matched)
        mask = masks[0]
        for more in masks[1:]:
            mask &= more
        if len(self._mask_cache) > 64:
            self._mask_cache.clear()
        self._mask_cache[f] = (self.version, mask)
        return mask

    def _acl_classes(self) -> list[tuple[dict, np.ndarray]]:
        """Per distinct ``acl`` value (or its absence): a document of that class's metadata, and the class's slots."""
        cached = self._mask_cache.get(_ACL_CLASSES)
        if cached and cached[0] == self.version:
            return cached[1]  # type: ignore[return-value]
        classes: dict[str, tuple[dict, list[int]]] = {}
        for rec in self.docs.values():
            has = flt.ACL_KEY in rec.metadata
            key = json.dumps(rec.metadata[flt.ACL_KEY], sort_keys=True, default=repr) if has else ""
            entry = classes.setdefault(key, ({flt.ACL_KEY: rec.metadata[flt.ACL_KEY]} if has else {}, []))
            entry[1].extend(rec.slots)
        out = [(meta, np.asarray(slots, dtype=np.int64)) for meta, slots in classes.values()]
        self._mask_cache[_ACL_CLASSES] = (self.version, out)  # type: ignore[assignment]
        return out

    def _acl_mask(self, acl: flt.Acl) -> np.ndarray:
        mask = np.zeros(max(self.store.ntotal, 1), dtype=bool)
        for meta, slots in self._acl_classes():
            if flt.matches(acl, meta):  # the one definition of who an acl admits
                mask[slots] = True
        return mask

    def chunk(self, slot: int) -> tuple[DocRecord, int, str]:
        rec = self.slot_doc[slot]
        assert rec is not None, f"slot {slot} is deleted"  # searches never return deleted slots
        i = self.slot_seq[slot]
        return rec, i, rec.chunk_text(i)

    def list_documents(self, f: flt.Filter | None, offset: int, limit: int,
                       search: DocSearch | None = None) -> tuple[list[DocRecord], int]:
        if search is not None and search.doc_id is not None:  # one document: a dict lookup, not a scan
            one = self.docs.get(search.doc_id)
            records = [one] if one is not None else []
        else:
            records = list(self.docs.values())
        if f:
            records = [r for r in records if flt.matches(f, r.metadata)]
        if search is not None:
            records = [r for r in records if search.matches(r.doc_id, r.text)]
        return records[offset : offset + limit], len(records)
