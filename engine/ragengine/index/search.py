"""Retrieval over one index: dense (FAISS) + BM25 fused (retrieval.hybrid), then optional rerank.

The query embedding (embedding thread) and the BM25 search (a worker thread) run at the same time;
the dense search, fusion and result assembly then run under the index's read lock. Filters become a
slot mask applied inside both searches, before top-k.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ragengine import metrics
from ragengine.index.places import Structure, chunk_place, is_code, node_metadata
from ragengine.index.state import IndexState, node_id
from ragengine.index.types import DocRecord, RetrievedNode, cosine_to_score
from ragengine.observability import tracing
from ragengine.retrieval import long_query
from ragengine.retrieval.grouping import OVERFETCH, cap_per_document
from ragengine.retrieval.hybrid import FusionParams, candidate_pool, fuse, ranks
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder
    from ragengine.retrieval.rerank import Reranker


def _one_openmp_thread() -> None:
    """Each search worker runs FAISS on one OpenMP thread (libgomp keeps the setting per thread): a single
    query's flat search takes well under a millisecond, and concurrent queries that each fan out over every
    core spin against each other (issue 28: 56 req/s at 16 clients, 126 with OMP_NUM_THREADS=1). Ingestion
    and HNSW builds run on other threads and keep every core."""
    import faiss

    faiss.omp_set_num_threads(1)


# Searches only (ingestion embeds on the embedder's own thread), so queries never queue behind writes.
_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="search", initializer=_one_openmp_thread)
MAX_WIDEN = 10_000  # candidates at most when widening for max_chunks_per_document


def _pool_size(top_k: int, reranking: bool, settings: EngineSettings) -> int:
    want = max(top_k, settings.rerank_candidates) if reranking else top_k
    return candidate_pool(want, settings.fusion_candidates)


def _bm25(state: IndexState, query: str, pool: int, f: Any) -> tuple[int, np.ndarray, np.ndarray]:
    start = time.perf_counter()
    with tracing.stage("keyword_search", candidates=pool) as span, state.rw.read():
        allowed = state.allowed_mask(f)
        slots, scores = state.bm25.search(query, pool, state.store.alive, allowed)
        version = state.version
        tracing.annotate(span, hits=len(slots), filtered=allowed is not None)
    metrics.SEARCH_SECONDS.labels(stage="sparse").observe(time.perf_counter() - start)
    return version, slots, scores


def _dense_and_fuse(state: IndexState, qvec: np.ndarray, query: str, pool: int, n_out: int, f: Any,
                    sparse: tuple[int, np.ndarray, np.ndarray] | None, hybrid: bool,
                    settings: EngineSettings) -> list[RetrievedNode]:
    s_slots = s_scores = None
    with state.rw.read():
        if hybrid and (sparse is None or sparse[0] != state.version):
            # A write landed between the two phases: BM25 slots may be stale, search again.
            _v = state.version
            allowed = state.allowed_mask(f)
            s_slots, s_scores = state.bm25.search(query, pool, state.store.alive, allowed)
        elif hybrid and sparse is not None:
            _, s_slots, s_scores = sparse
        allowed = state.allowed_mask(f)
        start = time.perf_counter()
        with tracing.stage("dense_search", candidates=pool, kind=state.store.kind, filtered=allowed is not None) as span:
            d_slots, d_cos = state.store.search(qvec, pool, allowed)
            tracing.annotate(span, hits=len(d_slots))
        metrics.SEARCH_SECONDS.labels(stage="dense").observe(time.perf_counter() - start)
        start = time.perf_counter()
        with tracing.stage("fusion", method=settings.fusion if hybrid else "dense_only",
                           candidates=n_out) as span:
            nodes = _fuse(state, qvec, d_slots, d_cos, s_slots, s_scores, n_out, settings)
            tracing.annotate(span, hits=len(nodes))
        metrics.SEARCH_SECONDS.labels(stage="fusion").observe(time.perf_counter() - start)
        return nodes


def _fuse(state: IndexState, qvec: np.ndarray, d_slots: np.ndarray, d_cos: np.ndarray, s_slots: np.ndarray | None,
          s_scores: np.ndarray | None, n_out: int, settings: EngineSettings) -> list[RetrievedNode]:
    """The fused order (retrieval.hybrid.fuse; dense only without BM25 lists) as result nodes."""
    dense = dict(zip(np.asarray(d_slots).tolist(), np.asarray(d_cos, dtype=np.float64).tolist(), strict=True))
    fused: dict[int, float] = {}
    if s_slots is not None and s_scores is not None:
        sparse_map = dict(zip(np.asarray(s_slots).tolist(), np.asarray(s_scores, dtype=np.float64).tolist(), strict=True))
        # Fusion call site: the pure retrieval.hybrid.fuse, shared by every store backend.
        fused = dict(fuse(list(dense.items()), list(sparse_map.items()), params=FusionParams.from_settings(settings)))
        order = list(fused)[:n_out]
    else:
        sparse_map = {}
        order = list(dense)[:n_out]
    dense_ranks, sparse_ranks = ranks(list(dense)), ranks(list(sparse_map))
    missing = [s for s in order if s not in dense]
    extra = dict(zip(missing, state.store.cosines(qvec, np.asarray(missing)).tolist(), strict=True)) if missing else {}
    nodes = []
    for slot in order:
        rec, i, text = state.chunk(slot)
        cos = dense.get(slot, extra.get(slot, 0.0))
        score = cosine_to_score(cos)
        nid, metadata = _hit(rec, i, text)
        nodes.append(RetrievedNode(
            doc_id=rec.doc_id, node_id=nid, text=text, score=score,
            metadata=dict(metadata), dense_score=score if slot in dense else None,
            sparse_score=sparse_map.get(slot), token_counts=rec.chunk_tokens(i),
            dense_rank=dense_ranks.get(slot), sparse_rank=sparse_ranks.get(slot), fused_score=fused.get(slot),
        ))
    return nodes


def _hit(rec: DocRecord, i: int, text: str) -> tuple[str, dict]:
    """Chunk ``i``'s node id and metadata: where it is (heading path, page, slide, ...) and its citation text
    (index/places.py), worked out on its first hit and kept on the record (``DocRecord.hits``). Two searches
    placing the same chunk at once both store the same value."""
    hits = rec.hits
    if hits is None:
        hits = rec.hits = {}
    found = hits.get(i)
    if found is None:
        span = (0, len(rec.text)) if rec.spans is None else rec.spans[i]
        place = chunk_place(rec.text, rec.metadata, span, _structure(rec))
        found = hits[i] = (node_id(rec.doc_id, i, text), node_metadata(rec.metadata, place, rec.doc_id))
    return found


def _structure(rec: DocRecord) -> Structure | None:
    """The record's document structure, read once (a hit's place needs it; compute_parts was most of a fusion)."""
    if rec.structure is None and not is_code(rec.metadata):
        rec.structure = Structure.of(rec.text)  # a race only reads it twice: the same value
    return rec.structure


def _widen_for_documents(nodes: list[RetrievedNode], state: IndexState, qvec: np.ndarray, query: str, n_out: int,
                         f: Any, hybrid: bool, settings: EngineSettings, top_k: int, cap: int | None) -> list[RetrievedNode]:
    """Document-level results: search again with twice the candidates while capping would leave fewer
    than ``top_k`` and the index has more (the capped count does not depend on order, so a later
    rerank keeps it), up to MAX_WIDEN candidates."""
    while (cap is not None and len(nodes) == n_out and n_out < MAX_WIDEN
           and len(cap_per_document(nodes, cap, lambda n: n.doc_id)) < top_k):
        n_out = min(n_out * 2, MAX_WIDEN)
        nodes = _dense_and_fuse(state, qvec, query, n_out, n_out, f, None, hybrid, settings)
    return nodes


async def search_index(state: IndexState, embedder: Embedder, settings: EngineSettings, query: str, top_k: int, f: Any,
                       query_embedding: np.ndarray | None, reranker: Reranker | None,
                       max_per_document: int | None = None, *,
                       long_query_windows: bool | None = None) -> list[RetrievedNode]:
    with tracing.stage("retrieval", index=state.name, store="faiss", top_k=top_k, hybrid=bool(settings.hybrid),
                       filtered=f is not None, max_per_document=max_per_document) as span:
        tracing.content(span, "query", query)
        nodes = await _search(state, embedder, settings, query, top_k, f, query_embedding, reranker, max_per_document,
                              long_query_windows)
        metrics.RETRIEVED_CHUNKS.observe(len(nodes))
        tracing.annotate(span, hits=len(nodes), top_score=round(nodes[0].score, 4) if nodes else None,
                         doc_ids=retrieved_ids(nodes))
        return nodes


def retrieved_ids(nodes: list[RetrievedNode], limit: int = 20) -> list[str]:
    """What a retrieval found, for its span: the first ``limit`` document ids (ids, never text)."""
    return [n.doc_id for n in nodes[:limit]]


async def _search(state: IndexState, embedder: Embedder, settings: EngineSettings, query: str, top_k: int, f: Any,
                  query_embedding: np.ndarray | None, reranker: Reranker | None, max_per_document: int | None,
                  long_query_windows: bool | None) -> list[RetrievedNode]:
    start = time.perf_counter()
    hybrid = bool(settings.hybrid)
    pool = _pool_size(top_k, reranker is not None, settings)
    n_out = max(top_k, settings.rerank_candidates) if reranker is not None else top_k
    if max_per_document is not None:  # document-level results: over-fetch, cap below
        pool = n_out = max(pool, n_out, top_k * OVERFETCH)
    # BM25 runs in a worker thread while the query is embedded (micro-batched with other concurrent
    # queries, so N queries cost one forward pass, not N contending ones); FAISS search and fusion
    # then run in one more hop from the event loop. (bound: their spans join the request's trace.)
    sparse_future = _POOL.submit(tracing.bound(_bm25), state, query, pool, f) if hybrid else None
    try:
        qvec = await long_query.query_vector(embedder, settings, query, query_embedding, long_query_windows)

        def job() -> list[RetrievedNode]:
            sparse = sparse_future.result() if sparse_future is not None else None
            nodes = _dense_and_fuse(state, qvec, query, pool, n_out, f, sparse, hybrid, settings)
            return _widen_for_documents(nodes, state, qvec, query, n_out, f, hybrid, settings, top_k, max_per_document)

        nodes = await asyncio.get_running_loop().run_in_executor(_POOL, tracing.bound(job))
    finally:
        if sparse_future is not None:
            sparse_future.cancel()
    if reranker is not None and len(nodes) > 1:
        order = await reranker.order(query, [n.text for n in nodes])
        nodes = [nodes[i] for i in order]
    nodes = cap_per_document(nodes, max_per_document, lambda n: n.doc_id)
    metrics.RETRIEVE_SECONDS.observe(time.perf_counter() - start)
    return nodes[:top_k]
