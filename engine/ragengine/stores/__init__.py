"""External vector stores (PostgreSQL + pgvector, Milvus) behind one adapter contract (``base``).

``build_adapter(settings, dim)`` makes the configured store's adapter; the index registry the engine serves
from (``ragengine.versions.build_registry``) puts the version layer over ``StoreRegistry`` on it, or over
the embedded FAISS registry (``ragengine.index.registry``).
"""

from __future__ import annotations

from typing import Any

from ragengine.settings import EngineSettings


def build_adapter(settings: EngineSettings, dim: int) -> Any:
    from ragengine.errors import BadRequest

    if not settings.vector_store_url:
        raise BadRequest(f"vector_store={settings.vector_store} needs vector_store_url (RAGENGINE_VECTOR_STORE_URL).")
    if settings.vector_store == "postgres":
        from ragengine.stores.postgres.store import PostgresStore

        return PostgresStore(settings.vector_store_url, schema=settings.vector_store_prefix, dim=dim,
                             hnsw_m=settings.hnsw_m, ef_construction=settings.hnsw_ef_construction,
                             ef_search=settings.hnsw_ef_search, hnsw_threshold=settings.store_hnsw_threshold,
                             build_memory_mb=settings.store_build_memory_mb,
                             keyword_index=settings.store_keyword_index)
    if settings.vector_store == "milvus":
        from ragengine.stores.milvus import MilvusStore

        return MilvusStore(settings.vector_store_url, prefix=settings.vector_store_prefix, dim=dim,
                           hnsw_m=settings.hnsw_m, ef_construction=settings.hnsw_ef_construction,
                           ef_search=settings.hnsw_ef_search)
    raise BadRequest(f"Unknown vector_store {settings.vector_store!r}.")
