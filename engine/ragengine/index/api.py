"""The index API, as two ``Protocol``\\ s the registries implement (mypy checks each against them).

- ``IndexAPI``: what every registry serves alike: the embedded FAISS one (``index.registry.IndexRegistry``),
  the external stores' (``stores.registry.StoreRegistry``) and the version layer over either
  (``versions.registry.VersionedRegistry``, what the engine serves from; ``versions.build_registry``). Code
  that only reads and writes documents takes an ``IndexAPI``; code that needs versions (books, re-indexes,
  evaluations) takes the ``VersionedRegistry``.
- ``PhysicalIndexes``: what the version layer asks of a store's own registry beside that: physical indexes
  ("<name>", "<name>/v2", ...) made empty, compared by digest, synced, copied with their vectors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ragengine.index.chunk_tokens import ChunkTokenCounter
from ragengine.index.documents import DocSearch, NewDoc
from ragengine.index.types import ChunkingConfig, RetrievedNode
from ragengine.retrieval import filters as flt

if TYPE_CHECKING:
    from ragengine.retrieval.rerank import Reranker


class IndexAPI(Protocol):
    """Named indexes of documents: lookup, writes, reads, and the registry's start and stop."""

    kind: str  # "faiss", "postgres", "milvus"
    reranker: Reranker | None  # the cross-encoder every search reorders its candidates with, if any
    chunk_tokens: ChunkTokenCounter | None  # the LLM's token counter, set when chat starts (index.chunk_tokens)

    # -- lookup and health ---------------------------------------------------------------------------
    def exists(self, name: str) -> bool: ...
    def names(self) -> list[str]: ...
    async def list_names(self) -> list[str]: ...

    async def chunking(self, name: str) -> ChunkingConfig | None:
        """How an index splits documents; None when there is no such index."""

    async def health(self) -> str | None:
        """None when the store serves; else why not (for /ready and the operator's conditions)."""

    def status(self) -> dict:
        """``{"indexes": {name: {"documents", "chunks", "kind", ...}}, "corrupt": {name: why}, ...}``."""

    async def start(self, read_only: bool = False) -> None: ...
    async def close(self) -> None: ...

    # -- writes ----------------------------------------------------------------------------------------
    async def add_documents(self, index_name: str, documents: list[dict], chunking: dict | None = None) -> list[dict]:
        ...

    async def add_precomputed(self, index_name: str, texts: list[str], vectors: np.ndarray,
                              metadatas: list[dict] | None = None) -> None: ...
    async def update_documents(self, index_name: str, documents: list[dict]) -> dict: ...
    async def update_metadata(self, index_name: str, documents: list[dict]) -> dict: ...
    async def delete_documents(self, index_name: str, doc_ids: list[str]) -> dict: ...
    async def delete_index(self, name: str) -> None: ...
    async def persist(self, name: str, path: str | None) -> str: ...

    # -- reads -----------------------------------------------------------------------------------------
    async def list_documents(self, index_name: str, *, limit: int = 10, offset: int = 0,
                             max_text_length: int | None = 1000, metadata_filter: dict | str | None = None,
                             acl: flt.Acl | None = None, search: DocSearch | None = None) -> dict: ...

    async def retrieve(self, index_name: str, query: str, top_k: int, *, filters: dict | None = None,
                       metadata_filter: dict | None = None, query_embedding: np.ndarray | None = None,
                       max_chunks_per_document: int | None = None, long_query_windows: bool | None = None,
                       acl: flt.Acl | None = None) -> list[RetrievedNode]: ...


class PhysicalIndexes(IndexAPI, Protocol):
    """A store's own registry as the version layer uses it. Its names are physical (an index version is
    "<name>/v<n>"); each is embedded with the model ``index.models.IndexModels`` names for it."""

    corrupt: dict[str, str]  # physical index -> why it could not be loaded (FAISS; external stores: none)

    async def ensure(self, name: str, chunking: dict | None) -> None:
        """Create index ``name`` when it does not exist (a new version exists while empty)."""

    async def dim_of(self, name: str) -> int | None:
        """The dimension of the index's vectors; None when there is no such index."""

    async def config_of(self, name: str) -> dict: ...

    async def digests(self, name: str) -> dict[str, str]:
        """doc_id -> a digest of its text and metadata (what two versions must hold the same of)."""

    async def fetch(self, name: str, doc_ids: list[str]) -> dict[str, NewDoc]: ...

    async def sync_documents(self, name: str, docs: list[NewDoc], *, chunking: dict | None = None,
                             source: str | None = None) -> int:
        """Make ``name`` hold ``docs`` as given; with ``source``, only those ``source`` still holds exactly so
        (an older copy never lands over a newer write). -> documents written."""

    def export_batches(self, name: str, batch: int = 256) -> AsyncIterator[list[dict]]:
        """Every document with its spans, token counts and vectors, ``batch`` at a time."""

    async def import_batch(self, name: str, config: dict, docs: list[dict]) -> None:
        """Write exported documents as they are (spans, token counts, vectors): no embedding."""

    async def finish_load(self, name: str) -> None:
        """After a bulk load (a version built): whatever the store builds in one pass (PostgreSQL: the HNSW
        index); nothing where the store builds as it writes."""

    async def load(self, name: str, path: str) -> str:
        """A ``/persist`` copy as the new index ``name`` (FAISS; the external stores refuse it)."""
