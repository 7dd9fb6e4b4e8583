"""The index API over an external store (PostgreSQL + pgvector, Milvus): stateless, so replicas share it.

Same public surface and the same document semantics as the embedded FAISS registry
(``ragengine.index.registry``): both use ``ragengine.index.documents`` for validation and the add /
update decisions, the same chunker, the same embedder, the same filter parser, the same fusion and
reranker. What differs is where the data lives: every read goes to the store, every write is one
store transaction (``StoreAdapter.write``), so a 200 means committed and visible to every replica.

The engine keeps no index state of its own beyond a short-lived cache of index names and counts for
the synchronous ``exists()`` / ``names()`` / ``status()`` (``/health`` and ``/v1/models`` must not
wait on the database): a miss in ``exists()`` asks the store, so an index created through another
replica is found at once; counts in ``/health`` may lag by ``REFRESH_S``.

Names here are the store's own (an index version is "<name>/v<n>", see ``ragengine.versions``); each index
is embedded with the model ``models`` (``index.models.IndexModels``) names for it, its vectors' dimension fixed
by the adapter per index. The class implements ``index.api.PhysicalIndexes``.

Longer than 400 lines on purpose: it is one class, the ``PhysicalIndexes`` protocol over a ``StoreAdapter``, whose
methods share the name cache and the background upkeep; the pieces that stand alone are already their own
modules (``index.documents``, ``retrieval``, the adapters).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ragengine import metrics
from ragengine.errors import BadRequest, Conflict, EngineError, NotFound, Unprocessable
from ragengine.index import disk
from ragengine.index.api import PhysicalIndexes
from ragengine.index.chunk_tokens import ChunkTokenCounter, counts_to_store, per_document
from ragengine.index.chunking import Chunker, locate_spans, new_index_config
from ragengine.index.contextual import index_texts
from ragengine.index.documents import (
    DocSearch,
    NewDoc,
    clean_documents,
    content_id,
    doc_out,
    listed,
    metadata_updates,
    new_documents,
    plan_update,
    retrieval_request,
    split_keys_changed,
)
from ragengine.index.models import IndexModels
from ragengine.index.places import chunk_places, node_metadata
from ragengine.index.search import MAX_WIDEN, retrieved_ids
from ragengine.index.state import node_id
from ragengine.index.types import ChunkingConfig, RetrievedNode, cosine_to_score
from ragengine.observability import tracing
from ragengine.retrieval import filters as flt
from ragengine.retrieval import long_query
from ragengine.retrieval.grouping import OVERFETCH, cap_per_document
from ragengine.retrieval.hybrid import FusionParams, candidate_pool, fuse, ranks
from ragengine.settings import EngineSettings
from ragengine.stores.base import (
    ChunkWrite,
    DocumentRace,
    DocWrite,
    Hit,
    NoSuchIndex,
    StoreAdapter,
    StoreRefused,
    StoreUnavailable,
    describe,
)

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder
    from ragengine.retrieval.rerank import Reranker

log = logging.getLogger(__name__)
REFRESH_S = 2.0
MAINTAIN_S = 5.0  # how often the store's background upkeep runs (PostgreSQL: HNSW builds after bulk loads)


class StoreRegistry(PhysicalIndexes):
    def __init__(self, settings: EngineSettings, embedder: Embedder, adapter: StoreAdapter,
                 reranker: Reranker | None = None, models: IndexModels | None = None) -> None:
        self.settings = settings
        self.embedder = embedder
        self.reranker = reranker
        self.models = models or IndexModels.of(settings, embedder)
        self.adapter = adapter
        self.kind = adapter.kind
        self.corrupt: dict[str, str] = {}  # nothing to load: the store holds every index whole
        self.chunk_tokens: ChunkTokenCounter | None = None  # the LLM's counter, set when chat starts
        self._configs: dict[str, dict] = {}
        self._counts: dict[str, tuple[int, int]] = {}
        self._chunkers: dict[str, tuple[dict, Chunker]] = {}
        self._fresh_at = 0.0
        self._unavailable: str | None = None
        self._refresher: asyncio.Task | None = None
        self._maintainer: asyncio.Task | None = None

    # -- start / stop / health ---------------------------------------------------------------------
    async def start(self, read_only: bool = False) -> None:
        """Open the store (migrations included). An unreachable store does not stop the engine: it
        starts, reports the reason on /health and /ready (503), and keeps trying in the background.
        ``read_only`` is a FAISS stand-by's (ragengine.handover): replicas of a store all serve at once."""
        if read_only:
            raise ValueError(f"a read-only stand-by is for the embedded FAISS store, not {self.kind}")
        try:
            await asyncio.to_thread(self.adapter.open)
            await self._refresh()
        except StoreUnavailable as exc:
            self._unavailable = str(exc)
            log.error("vector store %s unavailable: %s", self.kind, exc)
        self._refresher = asyncio.create_task(self._refresh_loop(), name="store-refresh")
        self._maintainer = asyncio.create_task(self._maintain_loop(), name="store-maintain")

    async def close(self) -> None:
        for task in (self._refresher, self._maintainer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await asyncio.to_thread(self.adapter.close)

    async def _maintain_loop(self) -> None:
        """The store's upkeep, apart from the refresh (an HNSW build takes minutes; /health must not wait)."""
        while True:
            await asyncio.sleep(MAINTAIN_S)
            try:
                await asyncio.to_thread(self.adapter.maintain)
            except Exception as exc:  # the store may be down; the refresh loop reports that
                log.warning("vector store upkeep failed: %s", describe(exc))

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                if self._unavailable is not None:
                    await asyncio.to_thread(self.adapter.open)
                await self._refresh()
                if self._unavailable is not None:
                    log.info("vector store %s reachable again", self.kind)
                self._unavailable = None
            except StoreUnavailable as exc:
                self._unavailable = str(exc)
            except Exception as exc:  # keep refreshing; health() reports the reason
                self._unavailable = describe(exc)

    async def _refresh(self) -> None:
        configs, counts = await asyncio.to_thread(lambda: (self.adapter.indexes(), self.adapter.counts()))
        for name in set(self._counts) - set(counts):  # dropped through another replica
            metrics.forget_index(name)
        self._configs, self._counts, self._fresh_at = configs, counts, time.monotonic()
        for name, (docs, chunks) in counts.items():
            metrics.INDEX_DOCUMENTS.labels(name).set(docs)
            metrics.INDEX_CHUNKS.labels(name).set(chunks)

    async def _after_write(self) -> None:
        """Counts and names as this replica now knows them (/health and the gauges show the write at once)."""
        try:
            await self._refresh()
        except StoreUnavailable as exc:  # the write is committed; only the gauges wait for the next refresh
            log.warning("refreshing index counts after a write failed: %s", exc)

    async def health(self) -> str | None:
        """None when the store serves; else the reason (for /ready and the operator's conditions)."""
        try:
            await asyncio.to_thread(self.adapter.ping)
        except StoreUnavailable as exc:
            self._unavailable = str(exc)
        else:
            if self._unavailable is not None:
                try:
                    await asyncio.to_thread(self.adapter.open)
                    self._unavailable = None
                except StoreUnavailable as exc:
                    self._unavailable = str(exc)
        return None if self._unavailable is None else f"{self.kind} store unavailable: {self._unavailable}"

    def status(self) -> dict:
        indexes = {n: {"documents": d, "chunks": c, "kind": self.kind} for n, (d, c) in sorted(self._counts.items())}
        out: dict[str, Any] = {"indexes": indexes, "corrupt": {}}
        if self._unavailable is not None:
            out["store_error"] = self._unavailable
        return out

    # -- lookup ------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self._configs)

    async def list_names(self) -> list[str]:
        configs = await self.call(self.adapter.indexes)
        self._configs = configs
        return sorted(configs)

    async def chunking(self, name: str) -> ChunkingConfig | None:
        """How an index splits documents; None when there is no such index (asks the store)."""
        configs = await self.call(self.adapter.indexes)
        self._configs = configs
        return ChunkingConfig.from_dict(configs[name]) if name in configs else None

    def exists(self, name: str) -> bool:
        if name in self._configs and time.monotonic() - self._fresh_at < REFRESH_S * 2:
            return True
        try:  # a miss asks the store (one indexed lookup), so a fresh index on another replica counts
            configs = self.adapter.indexes()
        except StoreUnavailable as exc:
            raise EngineError(f"The {self.kind} store is unavailable: {exc}", status_code=503) from exc
        self._configs, self._fresh_at = configs, time.monotonic()
        return name in configs

    async def _config(self, name: str) -> dict:
        configs = await self.call(self.adapter.indexes)
        self._configs = configs
        if name not in configs:
            raise NotFound(f"No such index: '{name}' exists.")
        return configs[name]

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` (an adapter method) in a worker thread; an outage is a 503, a missing index a 404, refused data a
        422 (the version books' store calls go through it too: ``versions.books.StoreBooks``)."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except StoreUnavailable as exc:
            self._unavailable = str(exc)
            raise EngineError(f"The {self.kind} store is unavailable: {exc}", status_code=503) from exc
        except NoSuchIndex as exc:
            raise NotFound(f"No such index: '{exc.args[0]}' exists.") from None
        except StoreRefused as exc:
            raise Unprocessable(f"The {self.kind} store refused the data: {exc}") from exc

    async def _fused(self, index_name: str, query: str, qvec: np.ndarray, pool: int, n_out: int,
                     f: flt.Filter | None) -> list[RetrievedNode]:
        dense_task = self._timed("dense", self.adapter.dense, index_name, qvec, pool, f)
        if self.settings.hybrid:
            sparse_task = self._timed("sparse", self.adapter.keyword, index_name, query, qvec, pool, f)
            dense, sparse = await asyncio.gather(dense_task, sparse_task)
        else:
            dense, sparse = await dense_task, []
        params = FusionParams.from_settings(self.settings)
        with tracing.stage("fusion", method=params.method if sparse else "dense_only", candidates=n_out) as span:
            nodes = fuse_hits(dense, sparse, n_out, params)
            tracing.annotate(span, hits=len(nodes))
        return nodes

    async def _timed(self, stage: str, fn: Any, *args: Any) -> Any:
        start = time.perf_counter()
        name = "dense_search" if stage == "dense" else "keyword_search"
        try:
            # dense(name, vector, k, filter) and keyword(name, query, vector, k, filter): k and the filter come last
            with tracing.stage(name, candidates=args[-2], store=self.kind, filtered=args[-1] is not None) as span:
                hits = await self.call(fn, *args)
                tracing.annotate(span, hits=len(hits))
                return hits
        finally:
            metrics.SEARCH_SECONDS.labels(stage=stage).observe(time.perf_counter() - start)

    async def embedder_for(self, name: str) -> Embedder:
        """The embedding model of index ``name`` (loaded on first use)."""
        return await self.models.embedder_for(name)

    async def _chunker(self, name: str, config: dict) -> Chunker:
        embedder = await self.embedder_for(name)
        cached = self._chunkers.get(name)
        if cached is None or cached[0] != config or cached[1].embedder is not embedder:
            cached = (config, Chunker(embedder, ChunkingConfig.from_dict(config)))
            self._chunkers[name] = cached
        return cached[1]

    # -- writes ------------------------------------------------------------------------------------
    async def _new_config(self, name: str, chunking: dict | None) -> dict:
        embedder = await self.embedder_for(name)
        return new_index_config(self.settings, chunking, embedder.chunk_token_limit).to_dict()

    async def _prepare(self, chunker: Chunker, docs: list[NewDoc]) -> tuple[list[DocWrite], np.ndarray | None]:
        contextual = chunker.config.contextual

        def split() -> tuple[list[DocWrite], list[str]]:
            out, embedded = [], []
            for d in docs:
                spans = chunker.split(d.text, d.metadata)
                # Contextual chunks embed and keyword-index title + section path with the chunk, as in FAISS.
                indexed = index_texts(d.text, d.metadata, spans, contextual=contextual)
                places = chunk_places(d.text, d.metadata, spans)
                chunks = [ChunkWrite(i, s if isinstance(s, str) else d.text[s[0]:s[1]], indexed[i],
                                     place=places[i] or None) for i, s in enumerate(spans)]
                out.append(DocWrite(d.doc_id, d.text, d.metadata, chunks))
                embedded.extend(indexed)
            return out, embedded

        with tracing.stage("chunking", documents=len(docs)) as span:
            writes, texts = await asyncio.to_thread(split)
            tracing.annotate(span, chunks=len(texts))
        if not texts:
            return writes, None
        chunks = [c.text for w in writes for c in w.chunks]
        with tracing.stage("embedding", kind="documents", texts=len(texts), model_kind=chunker.embedder.kind):
            vectors, counted = await asyncio.gather(chunker.embedder.embed_texts(texts),
                                                    counts_to_store(self.chunk_tokens, chunks))
        tokens = per_document(counted, [len(w.chunks) for w in writes])
        # The LLM's token counts travel with each chunk into the store (index.chunk_tokens).
        writes = [dataclasses.replace(w, chunks=[dataclasses.replace(c, tokens={k: v[i] for k, v in t.items()})
                                                 for i, c in enumerate(w.chunks)]) if t else w
                  for w, t in zip(writes, tokens, strict=True)]
        return writes, vectors

    async def add_documents(self, index_name: str, documents: list[dict], chunking: dict | None = None) -> list[dict]:
        with tracing.stage("index_write", operation="add", index=index_name, store=self.kind, documents=len(documents)):
            return await self._add_documents(index_name, documents, chunking)

    async def _add_documents(self, index_name: str, documents: list[dict], chunking: dict | None) -> list[dict]:
        docs = clean_documents(documents, max_chars=self.settings.max_document_chars)
        if not docs:
            return []
        _validate_name(index_name)
        start = time.perf_counter()
        configs = await self.call(self.adapter.indexes)
        config = configs.get(index_name) or await self._new_config(index_name, chunking)
        held = await self._held(index_name, docs) if index_name in configs else {}
        new = new_documents(index_name, docs, held)
        if new:
            chunker = await self._chunker(index_name, config)
            writes, vectors = await self._prepare(chunker, new)
            try:
                await self.call(self.adapter.write, index_name, config, [], writes, vectors, add_only=True,
                                 dim=chunker.embedder.dim)
            except DocumentRace as exc:
                raise Conflict(f"Document '{exc.doc_id}' already exists in index '{index_name}' with different "
                               f"text; update it with POST /indexes/{index_name}/documents.") from exc
            await self._after_write()
        metrics.INGEST_SECONDS.observe(time.perf_counter() - start)
        return [doc_out(d.doc_id, d.text, held[d.doc_id][1] if d.doc_id in held else d.metadata) for d in docs]

    async def add_precomputed(self, index_name: str, texts: list[str], vectors: np.ndarray,
                              metadatas: list[dict] | None = None) -> None:
        """One-chunk documents with given unit vectors (benchmarks, migration): no chunking, no embedding."""
        _validate_name(index_name)
        configs = await self.call(self.adapter.indexes)
        config = configs.get(index_name) or await self._new_config(index_name, None)
        writes = [DocWrite(content_id(t), t, (metadatas[i] if metadatas else {}), [ChunkWrite(0, t)])
                  for i, t in enumerate(texts)]
        await self.call(self.adapter.write, index_name, config, [], writes,
                         np.ascontiguousarray(vectors, dtype=np.float32), add_only=True, dim=int(vectors.shape[1]))
        await self._after_write()

    async def import_documents(self, index_name: str, config: dict, docs: list[DocWrite], vectors: np.ndarray) -> None:
        """Write documents with their chunks and vectors as they are (``ragengine migrate``): no embedding."""
        _validate_name(index_name)
        await self.call(self.adapter.write, index_name, config, [d.doc_id for d in docs], docs, vectors, add_only=False,
                         dim=int(vectors.shape[1]) if vectors is not None and vectors.ndim == 2 else None)
        await self._after_write()

    async def update_documents(self, index_name: str, documents: list[dict]) -> dict:
        with tracing.stage("index_write", operation="update", index=index_name, store=self.kind,
                           documents=len(documents)):
            return await self._update_documents(index_name, documents)

    async def update_metadata(self, index_name: str, documents: list[dict]) -> dict:
        """The metadata of documents replaced, their text as the store holds it (chunks and vectors kept).
        No lock spans the read and the write (replicas share the store): a concurrent text update of the same
        document may be undone by it, which the next write of that text repairs."""
        with tracing.stage("index_write", operation="update_metadata", index=index_name, store=self.kind,
                           documents=len(documents)):
            await self._config(index_name)
            held = await self.call(self.adapter.get_documents, index_name, [d["doc_id"] for d in documents])
            found, missing = metadata_updates(documents, {k: v.text for k, v in held.items()})
            out = await self._update_documents(index_name, found) if found else {
                "updated_documents": [], "unchanged_documents": [], "not_found_documents": []}
            out["not_found_documents"] += missing
            return out

    async def _update_documents(self, index_name: str, documents: list[dict]) -> dict:
        config = await self._config(index_name)
        docs = clean_documents(documents, max_chars=self.settings.max_document_chars, need_id=True)
        plan = plan_update(docs, await self._held(index_name, docs))
        if plan.writes:
            writes, vectors = await self._prepare(await self._chunker(index_name, config), plan.changed_text)
            parts = [vectors] if vectors is not None else []
            for doc in plan.meta_only:  # same text and split: keep the chunks and their vectors
                chunks, kept = await self.call(self.adapter.chunk_vectors, index_name, doc.doc_id)
                writes.append(DocWrite(doc.doc_id, doc.text, doc.metadata, chunks))
                parts.append(kept)
            all_vectors = np.concatenate(parts) if parts else None
            await self.call(self.adapter.write, index_name, config, [d.doc_id for d in plan.writes], writes,
                             all_vectors, add_only=False)
            await self._after_write()
        return plan.result

    async def delete_documents(self, index_name: str, doc_ids: list[str]) -> dict:
        with tracing.stage("index_write", operation="delete", index=index_name, store=self.kind, documents=len(doc_ids)):
            return await self._delete_documents(index_name, doc_ids)

    async def _delete_documents(self, index_name: str, doc_ids: list[str]) -> dict:
        config = await self._config(index_name)
        unique = list(dict.fromkeys(doc_ids))
        held = await self.call(self.adapter.get_documents, index_name, unique)
        found = [d for d in unique if d in held]
        if found:
            await self.call(self.adapter.write, index_name, config, found, [], None, add_only=False)
            await self._after_write()
        return {"deleted_doc_ids": found, "not_found_doc_ids": [d for d in unique if d not in held]}

    async def delete_index(self, name: str) -> None:
        if not await self.call(self.adapter.drop_index, name):
            raise NotFound(f"No such index: '{name}' exists.")
        self._configs.pop(name, None)
        self._counts.pop(name, None)
        self._chunkers.pop(name, None)
        metrics.forget_index(name)

    async def persist(self, name: str, path: str | None) -> str:
        raise BadRequest(f"POST /persist is for the embedded FAISS store; with vector_store={self.kind} every "
                         f"write is already committed to the store.")

    async def load(self, name: str, path: str) -> str:
        raise BadRequest(f"POST /load is for the embedded FAISS store; move a FAISS index into {self.kind} with "
                         f"`ragengine migrate` instead.")

    async def _held(self, index_name: str, docs: list[NewDoc]) -> dict[str, tuple[str, dict]]:
        stored = await self.call(self.adapter.get_documents, index_name, [d.doc_id for d in docs])
        return {k: (v.text, v.metadata) for k, v in stored.items()}

    # -- reads -------------------------------------------------------------------------------------
    async def list_documents(self, index_name: str, *, limit: int = 10, offset: int = 0,
                             max_text_length: int | None = 1000, metadata_filter: Any = None, acl: flt.Acl | None = None,
                             search: DocSearch | None = None) -> dict:
        f = flt.combine(flt.from_metadata_filter(metadata_filter), acl)  # acl: the caller's document ACL
        await self._config(index_name)
        records, total = await self.call(self.adapter.list_documents, index_name, f, offset, limit, search)
        docs = [listed(r.doc_id, r.text, r.metadata, max_text_length) for r in records]
        return {"documents": docs, "count": len(docs), "total_items": total}

    async def retrieve(self, index_name: str, query: str, top_k: int, *, filters: dict | None = None,
                       metadata_filter: dict | None = None, query_embedding: np.ndarray | None = None,
                       max_chunks_per_document: int | None = None,
                       long_query_windows: bool | None = None, acl: flt.Acl | None = None) -> list[RetrievedNode]:
        req = retrieval_request(query, top_k, filters=filters, metadata_filter=metadata_filter,
                                max_chunks_per_document=max_chunks_per_document, max_top_k=self.settings.max_top_k,
                                acl=acl)
        with tracing.stage("retrieval", index=index_name, store=self.kind, top_k=req.top_k, hybrid=self.settings.hybrid,
                           filtered=req.filter is not None, max_per_document=max_chunks_per_document) as span:
            tracing.content(span, "query", req.query)
            nodes = await self._retrieve(index_name, req.query, req.top_k, req.filter, query_embedding,
                                         max_chunks_per_document, long_query_windows)
            metrics.RETRIEVED_CHUNKS.observe(len(nodes))
            tracing.annotate(span, hits=len(nodes), top_score=round(nodes[0].score, 4) if nodes else None,
                             doc_ids=retrieved_ids(nodes))
            return nodes

    async def _retrieve(self, index_name: str, query: str, top_k: int, f: flt.Filter | None,
                        query_embedding: np.ndarray | None, max_chunks_per_document: int | None,
                        long_query_windows: bool | None) -> list[RetrievedNode]:
        start = time.perf_counter()
        reranking = self.reranker is not None
        n_out = max(top_k, self.settings.rerank_candidates) if reranking else top_k
        pool = candidate_pool(n_out, self.settings.fusion_candidates)  # the same pool as FAISS (docs/retrieval.md)
        if max_chunks_per_document is not None:  # document-level results: over-fetch, cap below
            pool = n_out = max(pool, top_k * OVERFETCH)
        # The index's own model embeds the query (an index version is searched with the model that built it).
        qvec = await long_query.query_vector(await self.embedder_for(index_name), self.settings, query, query_embedding,
                                             long_query_windows)
        nodes = await self._fused(index_name, query, qvec, pool, n_out, f)
        # Document-level results: search again with twice the candidates while capping would leave fewer
        # than top_k and the store has more, as the FAISS path does (search.MAX_WIDEN candidates at most).
        while (max_chunks_per_document is not None and len(nodes) == n_out and n_out < MAX_WIDEN
               and len(cap_per_document(nodes, max_chunks_per_document, lambda n: n.doc_id)) < top_k):
            pool = n_out = min(n_out * 2, MAX_WIDEN)
            nodes = await self._fused(index_name, query, qvec, pool, n_out, f)
        if self.reranker is not None and len(nodes) > 1:
            order = await self.reranker.order(query, [n.text for n in nodes])
            nodes = [nodes[i] for i in order]
        nodes = cap_per_document(nodes, max_chunks_per_document, lambda n: n.doc_id)
        metrics.RETRIEVE_SECONDS.observe(time.perf_counter() - start)
        return nodes[:top_k]


    # -- what the version layer uses (ragengine.versions; the FAISS registry has the same methods) ----
    async def ensure(self, name: str, chunking: dict | None) -> None:
        """Create index ``name`` when it does not exist (a new version exists while empty)."""
        _validate_name(name)
        configs = await self.call(self.adapter.indexes)
        if name not in configs:
            embedder = await self.embedder_for(name)
            config = await self._new_config(name, chunking)
            await self.call(self.adapter.write, name, config, [], [], None, add_only=True, dim=embedder.dim)
            await self._after_write()

    async def finish_load(self, name: str) -> None:
        """After a bulk load (an index version built): the store's one-pass index build, where it has one, so
        the version goes live searched by its HNSW index (the background upkeep would build it later)."""
        build = getattr(self.adapter, "build_hnsw", None)
        if build is not None:
            await self.call(build, name)

    async def dim_of(self, name: str) -> int | None:
        return await self.call(self.adapter.dim_of, name)

    async def config_of(self, name: str) -> dict:
        return await self._config(name)

    async def digests(self, name: str) -> dict[str, str]:
        return await self.call(self.adapter.digests, name)

    async def fetch(self, name: str, doc_ids: list[str]) -> dict[str, NewDoc]:
        held = await self.call(self.adapter.get_documents, name, doc_ids)
        return {d: NewDoc(d, h.text, h.metadata) for d, h in held.items()}

    async def sync_documents(self, name: str, docs: list[NewDoc], *, chunking: dict | None = None,
                             source: str | None = None) -> int:
        """Make ``name`` hold ``docs`` as given (add the missing, re-embed a changed text, keep the chunks and
        vectors of a metadata-only change); with ``source``, only the documents ``source`` still holds exactly
        so (checked inside the store's write, so an older copy never overwrites a newer write)."""
        _validate_name(name)
        if not docs:
            return 0
        configs = await self.call(self.adapter.indexes)
        config = configs.get(name) or await self._new_config(name, chunking)
        held = await self._held(name, docs) if name in configs else {}
        changed = [d for d in docs if d.doc_id not in held or held[d.doc_id][0] != d.text
                   or split_keys_changed(held[d.doc_id][1], d.metadata)]
        meta_only = [d for d in docs if d.doc_id in held and d not in changed and held[d.doc_id][1] != d.metadata]
        chunker = await self._chunker(name, config)
        writes, vectors = await self._prepare(chunker, changed) if changed else ([], None)
        parts = [vectors] if vectors is not None else []
        if meta_only:
            kept = await self.call(self.adapter.chunks_of, name, [d.doc_id for d in meta_only])
            for doc in meta_only:
                if doc.doc_id in kept:
                    writes.append(DocWrite(doc.doc_id, doc.text, doc.metadata, kept[doc.doc_id][0]))
                    parts.append(kept[doc.doc_id][1])
        if not writes:
            return 0
        await self.call(self.adapter.write, name, config, [w.doc_id for w in writes], writes,
                         np.concatenate(parts) if parts else None, add_only=False, dim=chunker.embedder.dim,
                         source=source)
        await self._after_write()
        return len(writes)

    async def export_batches(self, name: str, batch: int = 256) -> AsyncIterator[list[dict]]:
        """Every document with its chunk spans, token counts and vectors, ``batch`` at a time, in insertion order."""
        await self._config(name)
        offset = 0
        while True:
            page, _total = await self.call(self.adapter.list_documents, name, None, offset, batch)
            if not page:
                return
            offset += len(page)
            found = await self.call(self.adapter.chunks_of, name, [d.doc_id for d in page])
            out = []
            for doc in page:
                chunks, vectors = found.get(doc.doc_id, ([], None))
                if not chunks:
                    continue
                tokens: dict[str, list[int]] = {}
                for i, c in enumerate(chunks):
                    for key, n in (c.tokens or {}).items():
                        tokens.setdefault(key, [0] * len(chunks))[i] = n
                spans = [list(s) if isinstance(s, tuple) else s for s in locate_spans(doc.text, [c.text for c in chunks])]
                out.append({"id": doc.doc_id, "text": doc.text, "meta": doc.metadata, "spans": spans,
                            "tokens": tokens or None, "vectors": vectors})
            yield out

    async def import_batch(self, name: str, config: dict, docs: list[dict]) -> None:
        """Write exported documents as they are (chunks from their spans, token counts, vectors): no embedding."""
        _validate_name(name)
        if not docs:
            return
        config = ChunkingConfig.from_dict(config).to_dict()
        writes = []
        for d in docs:
            spans = d["spans"]
            indexed = index_texts(d["text"], d["meta"], spans, contextual=bool(config.get("contextual")))
            places = chunk_places(d["text"], d["meta"], spans)
            chunks = [ChunkWrite(i, s if isinstance(s, str) else d["text"][s[0]:s[1]], indexed[i],
                                 {k: v[i] for k, v in (d.get("tokens") or {}).items()} or None, places[i] or None)
                      for i, s in enumerate(spans)]
            writes.append(DocWrite(d["id"], d["text"], d["meta"], chunks))
        vectors = np.concatenate([d["vectors"] for d in docs])
        await self.call(self.adapter.write, name, config, [w.doc_id for w in writes], writes, vectors,
                         add_only=False, dim=int(vectors.shape[1]))
        await self._after_write()


def fuse_hits(dense: list[Hit], sparse: list[Hit], n_out: int, params: FusionParams) -> list[RetrievedNode]:
    """The store's dense and keyword lists fused by ``retrieval.hybrid.fuse``, as the FAISS path fuses them."""
    def key(h: Hit) -> tuple[str, int]:
        return (h.doc_id, h.seq)

    by_key = {key(h): h for h in sparse}
    by_key.update({key(h): h for h in dense})
    dense_keys = {key(h) for h in dense}
    sparse_scores = {key(h): h.keyword_score for h in sparse}
    fused: dict[tuple[str, int], float] = {}
    if sparse:
        fused = dict(fuse([(key(h), h.cosine) for h in dense], [(key(h), h.keyword_score or 0.0) for h in sparse],
                          params=params))
        order = list(fused)[:n_out]
    else:
        order = [key(h) for h in dense][:n_out]
    dense_ranks, sparse_ranks = ranks([key(h) for h in dense]), ranks([key(h) for h in sparse])
    nodes = []
    for k in order:
        h = by_key[k]
        score = cosine_to_score(h.cosine)
        nodes.append(RetrievedNode(doc_id=h.doc_id, node_id=node_id(h.doc_id, h.seq, h.text), text=h.text, score=score,
                                   metadata=node_metadata(h.metadata, h.place, h.doc_id),
                                   dense_score=score if k in dense_keys else None, sparse_score=sparse_scores.get(k),
                                   token_counts=h.tokens, dense_rank=dense_ranks.get(k),
                                   sparse_rank=sparse_ranks.get(k), fused_score=fused.get(k)))
    return nodes


def _validate_name(name: str) -> None:
    disk.validate_physical(name)  # the same names on every backend (each stays addressable as /indexes/{name})

