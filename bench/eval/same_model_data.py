"""What the same-model exploration (``same_model_explore``) scores on: a set's cached vectors and texts
(``same_model_cache`` writes them), the engine's BM25 over its chunks, and the two plain rankings a
variant changes one side of."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

K = 10
POOL = 50  # candidates per side the engine fuses (settings.fusion_candidates)
RESCORE = 100  # dense candidates a query-time re-scorer looks at
TUNING_SET = "zaragoza-construction-faq"
SETS = ("debian-faq", "zaragoza-construction-faq", "banking-knowledge")


def unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


@dataclass
class SetData:
    name: str
    chunk_vecs: np.ndarray  # (chunks, dim), unit
    query_vecs: np.ndarray  # (questions, dim), unit
    chunk_doc: np.ndarray  # chunk -> document index
    doc_ids: list[str]
    chunk_seq: np.ndarray
    chunk_text: list[str]
    chunk_context_text: list[str]
    chunk_title_vecs: np.ndarray  # (chunks, dim): the vector of the chunk's document title
    queries: list[str]
    relevant: list[frozenset[str]]
    cache: Path
    cos: np.ndarray = field(init=False)  # (questions, chunks)
    bm25_lists: list[list[tuple[int, float]]] = field(init=False)

    def __post_init__(self) -> None:
        self.cos = self.query_vecs @ self.chunk_vecs.T
        self.bm25 = build_bm25(self.chunk_text)
        self.bm25_lists = [bm25_search(self.bm25, q, RESCORE) for q in self.queries]
        n_docs = len(self.doc_ids)
        sums = np.zeros((n_docs, self.chunk_vecs.shape[1]), np.float32)
        np.add.at(sums, self.chunk_doc, self.chunk_vecs)
        self.doc_vecs = unit(sums)  # normalised mean of each document's chunk vectors
        self.doc_chunks = np.bincount(self.chunk_doc, minlength=n_docs)
        first = {}
        for c, (d, s) in enumerate(zip(self.chunk_doc, self.chunk_seq, strict=True)):
            if s == 0:
                first[int(d)] = c
        self.first_chunk_vecs = self.chunk_vecs[[first[int(d)] for d in self.chunk_doc]]

    def docs(self, chunks: list[int]) -> list[str]:
        return [self.doc_ids[self.chunk_doc[c]] for c in chunks]


def load(cache: Path, name: str) -> SetData:
    arrays = np.load(cache / f"{name}.npz")
    meta = json.loads((cache / f"{name}.json").read_text())
    doc_ids = list(dict.fromkeys(meta["chunk_doc"]))
    doc_index = {d: i for i, d in enumerate(doc_ids)}
    title_index = {t: i for i, t in enumerate(meta["titles"])}
    title_vecs = arrays["title_vecs"][[title_index[t] for t in meta["chunk_title"]]]
    return SetData(name, arrays["chunk_vecs"], arrays["query_vecs"],
                   np.array([doc_index[d] for d in meta["chunk_doc"]]), doc_ids, np.array(meta["chunk_seq"]),
                   meta["chunk_text"], meta["chunk_context_text"], title_vecs, meta["queries"],
                   [frozenset(r) for r in meta["relevant"]], cache)


def build_bm25(texts: list[str]):
    from ragengine.retrieval.bm25 import BM25Index

    index = BM25Index()
    for slot, text in enumerate(texts):
        index.add(slot, text)
    return index


def bm25_search(index, query: str, k: int) -> list[tuple[int, float]]:
    alive = np.ones(len(index.doc_len), dtype=bool)
    slots, scores = index.search(query, k, alive)
    return [(int(s), float(v)) for s, v in zip(slots, scores, strict=True)]


def bm25_weighted(index, weights: dict[str, float], k: int) -> list[tuple[int, float]]:
    """BM25 with a weight per (already tokenised) query term: what RM3 needs and ``BM25Index.search``
    (a set of terms, each weight 1) does not offer. Same idf / tf saturation as the engine."""
    import math

    n = len(index.doc_len)
    doc_len = np.frombuffer(index.doc_len, dtype=np.uint32).astype(np.float32)
    avgdl = max(index.total_len / index.live, 1.0)
    scores = np.zeros(n, np.float32)
    for term, w in weights.items():
        tid = index.vocab.get(term)
        if tid is None or index.df[tid] == 0:
            continue
        df = index.df[tid]
        idf = math.log(1.0 + (index.live - df + 0.5) / (df + 0.5))
        ids = np.frombuffer(index.postings[tid], dtype=np.uint32)
        tf = np.frombuffer(index.freqs[tid], dtype=np.uint16).astype(np.float32)
        scores[ids] += w * idf * tf * (index.k1 + 1.0) / (tf + index.k1 * (1.0 - index.b + index.b * doc_len[ids] / avgdl))
    hits = np.flatnonzero(scores > 0)
    top = hits[np.argsort(-scores[hits], kind="stable")][:k]
    return [(int(s), float(scores[s])) for s in top]


# -- the two rankings of a variant --------------------------------------------------------------------
def top(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    idx = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return [(int(i), float(scores[i])) for i in idx]


# A dense-side variant: (set, question index) -> [(chunk, score)] best first, at least POOL long.
DenseFn = Callable[[SetData, int], list[tuple[int, float]]]
# A BM25-side variant: (set, question index) -> [(chunk, BM25 score)] best first.
SparseFn = Callable[[SetData, int], list[tuple[int, float]]]


def plain_dense(s: SetData, qi: int) -> list[tuple[int, float]]:
    return top(s.cos[qi], RESCORE)


def plain_sparse(s: SetData, qi: int) -> list[tuple[int, float]]:
    return s.bm25_lists[qi]
