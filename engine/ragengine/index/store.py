"""FAISS vectors for one index: unit vectors, inner product (= cosine), exact or HNSW.

Vector ids are "slots" assigned in insertion order (FAISS's own sequential ids, so no id map is
stored). A delete tombstones its slots in the ``alive`` mask and searches pass that mask to FAISS as
an ``IDSelectorBitmap``; the registry compacts tombstones away before a snapshot. Below
``hnsw_threshold`` live vectors the index is ``IndexFlatIP`` (exact); above it the vectors migrate
once into ``IndexHNSWFlat``, or, with ``compression="sq8"``, into ``IndexHNSWSQ``: each vector kept as
8-bit codes (a quarter of the memory; the ranges trained on the vectors at the migration), so that every
vector read from the index is a decoded approximation (``vectors_at``). The compression is chosen when the
HNSW index is built; one read from disk keeps its format (and a compaction rebuilds it in that format), so a
changed setting never converts an existing HNSW index, in either direction. Filtered searches that HNSW
cannot answer completely (a selective filter, many tombstones) fall back to an exact scan of the allowed
vectors, so a filter always restricts the candidates before top-k is taken and never returns fewer hits
than exist.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class _Faiss:
    """faiss, imported by the first vector store made (an index created or restored): an engine with no index yet,
    or on PostgreSQL or Milvus, does not load it (22 MiB, a tenth of the start-up's imports; docs/performance.md)."""

    def __getattr__(self, name: str) -> Any:
        global faiss
        import faiss as module

        # faiss 1.15 skips BLAS below 128000 queries per batch, which makes batched flat search 10x slower.
        module.cvar.distance_compute_blas_threshold = 20
        faiss = module
        return getattr(module, name)


faiss: Any = _Faiss()  # Any: the SWIG module's stubs miss HNSW search parameters and selectors

EXACT_FRACTION = 0.1  # filtered HNSW searches allowing <= this share of vectors scan them exactly


class VectorStore:
    def __init__(self, dim: int, *, hnsw_threshold: int, hnsw_m: int = 32, ef_search: int = 256,
                 ef_construction: int = 80, compression: str = "none") -> None:
        if compression not in ("none", "sq8"):
            raise ValueError(f"unknown vector compression {compression!r} (none or sq8)")
        self.dim = dim
        self.compression = compression
        self.hnsw_threshold = hnsw_threshold
        self.hnsw_m, self.ef_search, self.ef_construction = hnsw_m, ef_search, ef_construction
        self.index: Any = faiss.IndexFlatIP(dim)
        self.alive = np.zeros(1024, dtype=bool)
        self.n_alive = 0
        self._bitmap: np.ndarray | None = None

    # -- shape -------------------------------------------------------------------------------------
    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def kind(self) -> str:
        return "hnsw" if isinstance(self.index, faiss.IndexHNSW) else "flat"

    def _storage(self) -> Any:
        return self.index if self.kind == "flat" else faiss.downcast_index(self.index.storage)

    @property
    def compressed(self) -> bool:
        return isinstance(self._storage(), faiss.IndexScalarQuantizer)

    def vectors(self) -> np.ndarray:
        """The stored vectors, (ntotal, dim): a zero-copy view valid until the next add, or for 8-bit codes a
        decoded copy of them all (exports and rebuilds only; searches read ``vectors_at``)."""
        n = self.ntotal
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.compressed:
            return self.vectors_at(np.arange(n, dtype=np.int64))
        return faiss.rev_swig_ptr(self._storage().get_xb(), n * self.dim).reshape(n, self.dim)

    def vectors_at(self, slots: np.ndarray | list[int]) -> np.ndarray:
        """The vectors of ``slots`` (decoded when compressed)."""
        slots = np.asarray(slots, dtype=np.int64)
        if not self.compressed:
            return self.vectors()[slots]
        if slots.size == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.asarray(self._storage().reconstruct_batch(slots), dtype=np.float32)

    def memory_bytes(self) -> int:
        extra = self.ntotal * self.hnsw_m * 2 * 4 if self.kind == "hnsw" else 0
        return self.ntotal * self.dim * (1 if self.compressed else 4) + extra

    # -- writes ------------------------------------------------------------------------------------
    def add(self, vectors: np.ndarray) -> np.ndarray:
        """Append unit vectors; returns their slots."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        start = self.ntotal
        self.index.add(vectors)
        end = self.ntotal
        if end > self.alive.size:
            grown = np.zeros(max(end, self.alive.size * 2), dtype=bool)
            grown[: self.alive.size] = self.alive
            self.alive = grown
        self.alive[start:end] = True
        self.n_alive += end - start
        self._bitmap = None
        return np.arange(start, end, dtype=np.int64)

    def remove(self, slots: np.ndarray | list[int]) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size:
            self.n_alive -= int(self.alive[slots].sum())
            self.alive[slots] = False
            self._bitmap = None

    def should_migrate(self) -> bool:
        return self.kind == "flat" and self.n_alive > self.hnsw_threshold

    def build_hnsw(self, vectors: np.ndarray) -> Any:
        """Build an HNSW index over ``vectors`` (slow; callers run it off the write path's lock)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.compression == "sq8":
            hnsw = faiss.IndexHNSWSQ(self.dim, faiss.ScalarQuantizer.QT_8bit, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            hnsw.train(vectors)  # each dimension's range, from the vectors there are now
        else:
            hnsw = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = self.ef_construction
        hnsw.hnsw.efSearch = self.ef_search
        hnsw.add(vectors)
        return hnsw

    def replace(self, index: Any, alive: np.ndarray) -> None:
        self.index = index
        self.alive = np.array(alive, dtype=bool, copy=True)
        if self.alive.size < 1024:
            self.alive = np.concatenate([self.alive, np.zeros(1024 - self.alive.size, bool)])
        self.n_alive = int(self.alive[: self.ntotal].sum())
        self._bitmap = None

    @classmethod
    def from_vectors(cls, vectors: np.ndarray, **kwargs: Any) -> VectorStore:
        dim = kwargs.pop("dim", None) or vectors.shape[1]
        store = cls(dim, **kwargs)
        if len(vectors) > store.hnsw_threshold:
            store.replace(store.build_hnsw(vectors), np.ones(len(vectors), bool))
        elif len(vectors):
            store.add(vectors)
        return store

    # -- reads -------------------------------------------------------------------------------------
    def _selector(self, allowed: np.ndarray | None) -> tuple[Any, np.ndarray | None, int]:
        n = self.ntotal
        if allowed is None:
            if self.n_alive == n:
                return None, None, n
            if self._bitmap is None:
                self._bitmap = np.packbits(self.alive[:n], bitorder="little")
            return faiss.IDSelectorBitmap(n, faiss.swig_ptr(self._bitmap)), self._bitmap, self.n_alive
        mask = allowed[:n] & self.alive[:n]
        bitmap = np.packbits(mask, bitorder="little")
        return faiss.IDSelectorBitmap(n, faiss.swig_ptr(bitmap)), bitmap, int(mask.sum())

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` live (and allowed) slots by cosine: (slots int64, cosines float32), best first."""
        n = self.ntotal
        if n == 0 or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        sel, _keep, n_ok = self._selector(allowed)
        if n_ok == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        k = min(k, n_ok)
        if self.kind == "hnsw":
            if sel is not None and n_ok <= EXACT_FRACTION * n:
                return self._exact(q, k, allowed)
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, 2 * k))
            if sel is not None:
                params.sel = sel
            dist, ids = self.index.search(q, k, params=params)
        else:
            params = faiss.SearchParameters(sel=sel) if sel is not None else None
            dist, ids = self.index.search(q, k, params=params)
        keep = ids[0] >= 0
        slots, cos = ids[0][keep].astype(np.int64), dist[0][keep]
        if len(slots) < k:  # HNSW could not reach k allowed vectors: scan them exactly instead
            return self._exact(q, k, allowed)
        return slots, cos

    def _exact(self, q: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        n = self.ntotal
        mask = self.alive[:n] if allowed is None else (allowed[:n] & self.alive[:n])
        ids = np.flatnonzero(mask)
        if ids.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        sims = self.vectors_at(ids) @ q[0]
        k = min(k, ids.size)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return ids[top].astype(np.int64), sims[top].astype(np.float32)

    def cosines(self, query: np.ndarray, slots: np.ndarray) -> np.ndarray:
        if len(slots) == 0:
            return np.zeros(0, np.float32)
        return self.vectors_at(slots) @ np.asarray(query, np.float32).reshape(-1)

    # -- persistence -------------------------------------------------------------------------------
    def write(self, path: str) -> None:
        faiss.write_index(self.index, path)

    def load_index(self, path: str, alive: np.ndarray) -> None:
        index = faiss.read_index(path)
        if index.d != self.dim:
            raise ValueError(f"vector file has dimension {index.d}, the embedding model has {self.dim}")
        if isinstance(index, faiss.IndexHNSW):
            index.hnsw.efSearch = self.ef_search
        self.replace(index, alive)
        if self.kind == "hnsw":  # an HNSW index keeps the vector format it was built with, whatever the setting says now
            self.compression = "sq8" if self.compressed else "none"
