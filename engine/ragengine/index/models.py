"""Which embedding model embeds each physical index.

A store's registry embeds index ``name``'s documents and queries with ``embedder_for(name)``; the version
layer (``ragengine.versions``) records each version's model here from its books (``record`` / ``forget``).
An index nobody recorded (no version layer: tests, benchmarks, ``ragengine migrate``) gets the pool's target
model. One object, given to both at construction (``versions.build_registry``): neither reaches into the
other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragengine.embedding.pool import EmbedderPool, ModelRef
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder


class IndexModels:
    def __init__(self, pool: EmbedderPool) -> None:
        self.pool = pool
        self._keys: dict[str, str] = {}  # physical index -> model key

    @classmethod
    def of(cls, settings: EngineSettings, embedder: Embedder) -> IndexModels:
        """The settings' model only, already loaded (a registry built without the version layer)."""
        target = ModelRef.from_settings(settings)
        return cls(EmbedderPool(settings, target, {target.key: embedder}))

    def key_for(self, physical: str) -> str:
        return self._keys.get(physical) or self.pool.target.key

    async def embedder_for(self, physical: str) -> Embedder:
        """The embedding model of index ``physical`` (loaded on first use)."""
        embedder: Embedder = await self.pool.get(self.key_for(physical))
        return embedder

    def record(self, physical: str, key: str) -> None:
        self._keys[physical] = key

    def forget(self, physical: str) -> None:
        self._keys.pop(physical, None)
