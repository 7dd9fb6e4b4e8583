"""Index versions: an index is served from one live version while another is built in the background from
the stored text (a new embedding model or chunking), then swapped in; exports and imports (docs/versions.md).

``build_registry(settings, embedder, reranker, target)`` is the index registry the engine serves from: the
version layer (``registry.VersionedRegistry``) over the embedded FAISS registry (``ragengine.index.registry``)
or ``ragengine.stores.registry.StoreRegistry`` over the configured store's adapter. ``embedder`` is the
target model's (``target``, default: the settings').
"""

from __future__ import annotations

from typing import Any


def build_registry(settings: Any, embedder: Any, reranker: Any = None, target: Any = None) -> Any:
    from ragengine.embedding.pool import EmbedderPool, ModelRef
    from ragengine.versions.books import FileBooks, StoreBooks
    from ragengine.versions.registry import VersionedRegistry

    target = target or ModelRef.from_settings(settings)
    pool = EmbedderPool(settings, target, {target.key: embedder})
    if settings.vector_store == "faiss":
        from ragengine.index.registry import IndexRegistry

        inner: Any = IndexRegistry(settings, embedder, reranker, pool)
        return VersionedRegistry(settings, inner, pool, FileBooks(settings.data_dir), shared=False)
    from ragengine.stores import build_adapter
    from ragengine.stores.registry import StoreRegistry

    inner = StoreRegistry(settings, embedder, build_adapter(settings, embedder.dim), reranker, pool)
    return VersionedRegistry(settings, inner, pool, StoreBooks(inner.adapter, inner._call), shared=True)
