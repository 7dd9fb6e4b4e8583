"""Index versions: an index is served from one live version while another is built in the background from
the stored text (a new embedding model or chunking), then swapped in; exports and imports (docs/versions.md).

``build_registry(settings, embedder, reranker, target, generation)`` is the index registry the engine serves
from: the version layer (``registry.VersionedRegistry``, an ``index.api.IndexAPI``) over the embedded FAISS
registry (``ragengine.index.registry``) or ``ragengine.stores.registry.StoreRegistry`` over the configured
store's adapter. ``embedder`` is the target model's (``target``, default: the settings'); ``generation``: the
embedding file's generation of it (None: the target comes from the settings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder
    from ragengine.embedding.pool import ModelRef
    from ragengine.retrieval.rerank import Reranker
    from ragengine.versions.registry import VersionedRegistry


def build_registry(settings: EngineSettings, embedder: Embedder, reranker: Reranker | None = None,
                   target: ModelRef | None = None, generation: int | None = None) -> VersionedRegistry:
    from ragengine.embedding.pool import EmbedderPool, ModelRef
    from ragengine.index.models import IndexModels
    from ragengine.versions.books import FileBooks, StoreBooks
    from ragengine.versions.registry import VersionedRegistry

    target = target or ModelRef.from_settings(settings)
    # One map of index -> model for both layers: the version layer records, the store's registry embeds with it.
    models = IndexModels(EmbedderPool(settings, target, {target.key: embedder}))
    if settings.vector_store == "faiss":
        from ragengine.index.registry import IndexRegistry

        faiss = IndexRegistry(settings, embedder, reranker, models)
        return VersionedRegistry(settings, faiss, models, FileBooks(settings.data_dir), shared=False,
                                 generation=generation)
    from ragengine.stores import build_adapter
    from ragengine.stores.registry import StoreRegistry

    store = StoreRegistry(settings, embedder, build_adapter(settings, embedder.dim), reranker, models)
    return VersionedRegistry(settings, store, models, StoreBooks(store.adapter, store.call), shared=True,
                             generation=generation)
