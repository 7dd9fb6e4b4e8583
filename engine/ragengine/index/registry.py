"""The named indexes of the embedded FAISS store: lookup, document writes and reads.

What makes a write durable (journal, snapshots, HNSW migration, index folders) is ``index.durability``;
validation and the add / update decisions are ``index.documents``, shared with the external stores.

The names here are the store's own (an index version is "<name>/v<n>", see ``ragengine.versions``); each
index is embedded with the model ``models`` (``index.models.IndexModels``) names for it. The class implements
``index.api.PhysicalIndexes``: the version layer's methods are in ``version_ops.py``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ragengine import metrics
from ragengine.errors import Conflict, NotFound
from ragengine.index import disk
from ragengine.index.api import PhysicalIndexes
from ragengine.index.chunk_tokens import ChunkTokenCounter, counts_to_store, per_document
from ragengine.index.chunking import Chunker, new_index_config
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
)
from ragengine.index.durability import Durability
from ragengine.index.models import IndexModels
from ragengine.index.search import search_index
from ragengine.index.state import IndexState
from ragengine.index.types import ChunkingConfig, RetrievedNode
from ragengine.index.version_ops import VersionOps, held_documents
from ragengine.observability import tracing
from ragengine.retrieval import filters as flt
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder
    from ragengine.retrieval.rerank import Reranker

log = logging.getLogger(__name__)


class IndexRegistry(VersionOps, PhysicalIndexes):
    """The embedded store: FAISS + BM25 in memory, a journal and snapshots on ``data_dir``."""

    kind = "faiss"

    def __init__(self, settings: EngineSettings, embedder: Embedder, reranker: Reranker | None = None,
                 models: IndexModels | None = None) -> None:
        self.settings = settings
        self.embedder = embedder  # the target model's: its dimension is a new index folder's default
        self.reranker = reranker
        self.models = models or IndexModels.of(settings, embedder)
        self.chunk_tokens: ChunkTokenCounter | None = None  # the LLM's counter, set when chat starts
        self.data_dir = Path(settings.data_dir)
        self._indexes: dict[str, IndexState] = {}
        self.corrupt: dict[str, str] = {}  # index folder or name → why it was not loaded
        self._registry_lock = asyncio.Lock()
        self.store_kwargs = {"hnsw_threshold": settings.hnsw_threshold, "hnsw_m": settings.hnsw_m,
                             "ef_search": settings.hnsw_ef_search, "ef_construction": settings.hnsw_ef_construction,
                             "compression": settings.vector_compression}
        self.durability = Durability(self.data_dir, embedder.dim, self.store_kwargs, settings.snapshot_journal_bytes,
                                     settings.writer_lock_timeout_seconds)

    # -- lookup ------------------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return name in self._indexes

    def names(self) -> list[str]:
        return sorted(self._indexes)

    async def chunking(self, name: str) -> ChunkingConfig | None:
        """How an index splits documents; None when there is no such index."""
        state = self._indexes.get(name)
        return state.config if state is not None else None

    async def list_names(self) -> list[str]:
        return self.names()

    async def health(self) -> str | None:
        """None: the store serves. FAISS lives in this process, so it serves whenever the process does
        (an index that failed to load is reported by ``status()``, the others still serve)."""
        return None

    def get(self, name: str) -> IndexState:
        state = self._indexes.get(name)
        if state is None:
            if name in self.corrupt:
                raise disk.unloadable(name, self.corrupt[name])
            raise NotFound(f"No such index: '{name}' exists.")
        return state

    def status(self) -> dict:
        return {
            "indexes": {n: {"documents": s.n_docs, "chunks": s.n_chunks, "kind": s.store.kind}
                        for n, s in sorted(self._indexes.items())},
            "corrupt": dict(self.corrupt),
        }

    # -- start / stop ------------------------------------------------------------------------------
    async def start(self, read_only: bool = False) -> None:
        """Restore every index from ``data_dir``; ``read_only``: a stand-by's load, beside the process that
        writes the folder (``Durability.restore_read_only``), which serves reads only."""
        durability = self.durability
        states, corrupt = await (durability.restore_read_only() if read_only else durability.restore())
        for key, why in corrupt.items():
            self.corrupt[key] = why
            metrics.INDEX_CORRUPT.labels(key).set(1)
        for state in states:
            self._attach(state, on_disk=True)
            if not read_only and state.store.should_migrate():
                await self.durability.migrate(state)
            log.info("restored index %r: %d documents, %d chunks", state.name, state.n_docs, state.n_chunks)

    async def close(self) -> None:
        await self.durability.close(list(self._indexes.values()))

    def _attach(self, state: IndexState, *, on_disk: bool) -> None:
        state.chunker = None  # made with the index's model on its first write (_chunker)
        state.on_disk = on_disk
        self._indexes[state.name] = state
        self.corrupt.pop(state.name, None)
        metrics.INDEX_CORRUPT.labels(state.name).set(0)
        self._gauges(state)

    def _gauges(self, state: IndexState) -> None:
        metrics.INDEX_DOCUMENTS.labels(state.name).set(state.n_docs)
        metrics.INDEX_CHUNKS.labels(state.name).set(state.n_chunks)

    # -- writes ------------------------------------------------------------------------------------
    async def embedder_for(self, name: str) -> Embedder:
        """The embedding model of index ``name`` (loaded on first use)."""
        return await self.models.embedder_for(name)

    async def _state_for_write(self, name: str, chunking: dict | None) -> IndexState:
        disk.validate_physical(name)
        if name in self._indexes:
            return self._indexes[name]
        embedder = await self.embedder_for(name)
        async with self._registry_lock:
            if name in self._indexes:
                return self._indexes[name]
            self.get(name) if name in self.corrupt else None
            config = new_index_config(self.settings, chunking, embedder.chunk_token_limit)
            state = IndexState(name, embedder.dim, config, self.store_kwargs)
            self._attach(state, on_disk=False)
            return state

    async def _chunker(self, state: IndexState) -> tuple[Embedder, Chunker]:
        embedder = await self.embedder_for(state.name)
        if embedder.dim != state.dim:
            raise Conflict(f"Index '{state.name}' holds {state.dim}-dimensional vectors but its embedding model "
                           f"'{self.models.key_for(state.name)}' makes {embedder.dim}-dimensional ones.")
        if state.chunker is None or state.chunker.embedder is not embedder:
            state.chunker = Chunker(embedder, state.config)
        return embedder, state.chunker

    async def _prepare(self, state: IndexState, docs: list[NewDoc]) -> tuple[list[dict], np.ndarray]:
        """Chunk (in a thread), embed (in the embedding thread) and count the LLM tokens of new documents."""
        embedder, chunker = await self._chunker(state)

        def split() -> list[dict]:
            return [{"id": d.doc_id, "text": d.text, "meta": d.metadata, "spans": chunker.split(d.text, d.metadata)}
                    for d in docs]

        with tracing.stage("chunking", documents=len(docs)) as span:
            adds = await asyncio.to_thread(split)
            tracing.annotate(span, chunks=sum(len(a["spans"]) for a in adds))
        # Contextual chunk text (title + section path) when the index asks for it; see contextual.index_texts.
        contextual = state.config.contextual
        texts = [t for a in adds for t in index_texts(a["text"], a["meta"], a["spans"], contextual=contextual)]
        chunks = [s if isinstance(s, str) else a["text"][s[0]:s[1]] for a in adds for s in a["spans"]]
        with tracing.stage("embedding", kind="documents", texts=len(texts), model_kind=embedder.kind):
            vectors, counted = await asyncio.gather(embedder.embed_texts(texts),
                                                    counts_to_store(self.chunk_tokens, chunks))
        for a, tokens in zip(adds, per_document(counted, [len(a["spans"]) for a in adds]), strict=True):
            a["spans"] = [list(s) if isinstance(s, tuple) else s for s in a["spans"]]
            if tokens:
                a["tokens"] = tokens
        return adds, vectors

    async def _commit(self, state: IndexState, op: dict, vectors: np.ndarray | None) -> None:
        """Journal then apply (``Durability.write``); the caller holds ``state.lock``."""
        with tracing.stage("commit", vectors=None if vectors is None else len(vectors)):
            await self.durability.write(state, op, vectors)
        self._gauges(state)
        await self.durability.maintain(state)

    def _drop_if_empty(self, state: IndexState) -> None:
        if not state.on_disk and state.n_docs == 0 and self._indexes.get(state.name) is state:
            del self._indexes[state.name]
            metrics.INDEX_DOCUMENTS.remove(state.name)
            metrics.INDEX_CHUNKS.remove(state.name)

    async def add_documents(self, index_name: str, documents: list[dict], chunking: dict | None = None) -> list[dict]:
        with tracing.stage("index_write", operation="add", index=index_name, store="faiss", documents=len(documents)):
            return await self._add_documents(index_name, documents, chunking)

    async def _add_documents(self, index_name: str, documents: list[dict], chunking: dict | None) -> list[dict]:
        docs = clean_documents(documents, max_chars=self.settings.max_document_chars)
        if not docs:
            return []
        start = time.perf_counter()
        state = await self._state_for_write(index_name, chunking)
        async with state.lock:
            try:
                new = new_documents(index_name, docs, held_documents(state, docs))
                tracing.annotate(new=len(new))
                if new:
                    adds, vectors = await self._prepare(state, new)
                    await self._commit(state, {"add": adds}, vectors)
            finally:
                self._drop_if_empty(state)
        metrics.INGEST_SECONDS.observe(time.perf_counter() - start)
        return [doc_out(d.doc_id, d.text, state.docs[d.doc_id].metadata if d.doc_id in state.docs else d.metadata)
                for d in docs]

    async def add_precomputed(self, index_name: str, texts: list[str], vectors: np.ndarray,
                              metadatas: list[dict] | None = None) -> None:
        """Insert one-chunk documents with given unit vectors (benchmarks, imports): no chunking, no embedding."""
        state = await self._state_for_write(index_name, None)
        async with state.lock:
            adds = [{"id": content_id(t), "text": t,
                     "meta": (metadatas[i] if metadatas else {}), "spans": [[0, len(t)]]} for i, t in enumerate(texts)]
            await self._commit(state, {"add": adds}, np.ascontiguousarray(vectors, dtype=np.float32))

    async def update_documents(self, index_name: str, documents: list[dict]) -> dict:
        with tracing.stage("index_write", operation="update", index=index_name, store="faiss", documents=len(documents)):
            return await self._update_documents(index_name, documents)

    async def update_metadata(self, index_name: str, documents: list[dict]) -> dict:
        with tracing.stage("index_write", operation="update_metadata", index=index_name, store="faiss",
                           documents=len(documents)):
            return await self._update_documents(index_name, documents, keep_text=True)

    async def _update_documents(self, index_name: str, documents: list[dict], keep_text: bool = False) -> dict:
        state = self.get(index_name)
        async with state.lock:  # keep_text: the text read and written under one lock
            missing: list[dict] = []
            if keep_text:
                documents, missing = metadata_updates(documents, {d["doc_id"]: rec.text for d in documents
                                                                  if (rec := state.docs.get(d["doc_id"])) is not None})
            docs = clean_documents(documents, max_chars=self.settings.max_document_chars, need_id=True)
            plan = plan_update(docs, held_documents(state, docs))
            plan.result["not_found_documents"] += missing
            if plan.writes:
                adds, vectors = await self._prepare(state, plan.changed_text) if plan.changed_text else ([], None)
                reused = []
                for doc in plan.meta_only:  # same text: keep chunks and vectors, no re-embedding
                    rec = state.docs[doc.doc_id]
                    adds.append({"id": doc.doc_id, "text": doc.text, "meta": doc.metadata, "spans": rec.span_list(),
                                 **({"tokens": rec.tokens} if rec.tokens else {})})
                    reused.append(state.doc_vectors(rec))
                parts = ([vectors] if vectors is not None else []) + reused
                all_vectors = np.concatenate(parts) if parts else None
                op = {"delete": [d.doc_id for d in plan.writes], "add": adds}
                await self._commit(state, op, all_vectors)
        return plan.result

    async def delete_documents(self, index_name: str, doc_ids: list[str]) -> dict:
        with tracing.stage("index_write", operation="delete", index=index_name, store="faiss", documents=len(doc_ids)):
            return await self._delete_documents(index_name, doc_ids)

    async def _delete_documents(self, index_name: str, doc_ids: list[str]) -> dict:
        state = self.get(index_name)
        async with state.lock:
            found = [d for d in dict.fromkeys(doc_ids) if d in state.docs]
            missing = [d for d in dict.fromkeys(doc_ids) if d not in state.docs]
            if found:
                await self._commit(state, {"delete": found}, None)
        return {"deleted_doc_ids": found, "not_found_doc_ids": missing}

    async def delete_index(self, name: str) -> None:
        async with self._registry_lock:
            state = self._indexes.get(name)
            if state is None and name not in self.corrupt:
                raise NotFound(f"No such index: '{name}' exists.")
            if state is not None:
                async with state.lock:
                    del self._indexes[name]
                    if state.journal is not None:
                        state.journal.close()
            self.corrupt.pop(name, None)
            await self.durability.remove(name)
            for gauge in (metrics.INDEX_DOCUMENTS, metrics.INDEX_CHUNKS, metrics.INDEX_CORRUPT):
                with contextlib.suppress(KeyError):
                    gauge.remove(name)

    # -- /persist and /load -----------------------------------------------------------------------
    async def persist(self, name: str, path: str | None) -> str:
        state = self.get(name)
        target = self.durability.copy_path(name, path)
        async with state.lock:
            await self.durability.persist(state, target)
        return f"{disk.PERSIST}/{target.name}"

    async def load(self, name: str, path: str) -> str:
        """A ``/persist`` copy (``<data_dir>/persist/<path>``) as the new index ``name``: checked and read whole
        before anything is written; ``name`` must be free (the version layer loads into a hidden name, then
        swaps it in with one book write: ``VersionedRegistry.load``)."""
        disk.validate_physical(name)
        source = self.durability.copy_path(name, path)
        earlier = source.with_name(source.name + ".old")
        if not source.exists() and earlier.is_dir():  # a /persist a crash cut between its two renames
            source = earlier
        if not source.exists():
            raise NotFound(f"Path does not exist: {disk.PERSIST}/{source.name}")
        state = await self.durability.read_copy(source, name)
        async with self._registry_lock:
            if self.exists(name) or name in self.corrupt:
                raise Conflict(f"Index '{name}' already exists. Use a different name or delete the existing index first.")
            await self.durability.install(state)
            self._attach(state, on_disk=True)
        return f"{disk.PERSIST}/{source.name.removesuffix('.old')}"

    # -- reads -------------------------------------------------------------------------------------
    async def list_documents(self, index_name: str, *, limit: int = 10, offset: int = 0, max_text_length: int | None = 1000,
                             metadata_filter: Any = None, acl: flt.Acl | None = None,
                             search: DocSearch | None = None) -> dict:
        state = self.get(index_name)
        f = flt.combine(flt.from_metadata_filter(metadata_filter), acl)  # acl: the caller's document ACL

        def page() -> dict:  # a thread: filtering a big index must not hold up the event loop
            with state.rw.read():
                records, total = state.list_documents(f, offset, limit, search)
                docs = [listed(rec.doc_id, rec.text, rec.metadata, max_text_length) for rec in records]
            return {"documents": docs, "count": len(docs), "total_items": total}

        return await asyncio.to_thread(page)

    async def retrieve(self, index_name: str, query: str, top_k: int, *, filters: dict | None = None,
                       metadata_filter: dict | None = None, query_embedding: np.ndarray | None = None,
                       max_chunks_per_document: int | None = None,
                       long_query_windows: bool | None = None, acl: flt.Acl | None = None) -> list[RetrievedNode]:
        state = self.get(index_name)
        req = retrieval_request(query, top_k, filters=filters, metadata_filter=metadata_filter,
                                max_chunks_per_document=max_chunks_per_document, max_top_k=self.settings.max_top_k,
                                acl=acl)
        embedder, _ = await self._chunker(state)  # the index's own model embeds the query
        return await search_index(state, embedder, self.settings, req.query, req.top_k, req.filter,
                                  query_embedding, self.reranker, req.max_chunks_per_document,
                                  long_query_windows=long_query_windows)
