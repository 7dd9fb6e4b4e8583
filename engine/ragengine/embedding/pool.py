"""Several embedding models at once: the engine's target model, plus every model an index version names.

An index version is bound to the model that embedded it (``ModelRef``): its queries are embedded with that
model, whatever the engine's target is now, so a version is never searched with the wrong model, during a
re-index, after a rollback, or on a replica that has not switched yet (docs/versions.md). ``EmbedderPool``
loads each model once, on first use, in a worker thread, and keeps it.

Memory: each model holds its weights and runtime once per process (measured in docs/versions.md:
all-MiniLM-L6-v2 ~+300 MiB RSS with OpenVINO, wordllama ~+40 MiB). A model no version uses any more is
released when the pool is told so (``release_unused``), not at once.

The target can come from a file (``RAGENGINE_EMBEDDING_FILE``, JSON ``{"model": ..., "url": ...}``) that
the operator renders from ``spec.embedding`` into a ConfigMap: read at start, and re-read when it changes,
so a new model starts re-indexes without restarting the engine (``read_target``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragengine.errors import EngineError
from ragengine.filestamp import file_stamp
from ragengine.settings import EngineSettings, embedding_digest

log = logging.getLogger(__name__)
RETRY_FAILED_S = 60.0  # a model that failed to load is tried again after this


class ModelUnavailable(EngineError):
    status_code = 503
    error_type = "model_unavailable"


@dataclass(frozen=True)
class ModelRef:
    """An embedding model's identity: its name (``package:<module>``, ``wordllama:<config>``, a path or a hub
    name) and, for a remote model, the OpenAI-compatible URL serving it."""

    model: str
    url: str | None = None

    @property
    def key(self) -> str:
        return self.model if not self.url else f"{self.url}#{self.model}"

    @classmethod
    def parse(cls, key: str) -> ModelRef:
        if "#" in key and key.startswith(("http://", "https://")):
            url, model = key.rsplit("#", 1)
            return cls(model, url)
        return cls(key)

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> ModelRef:
        return cls(settings.embedding_model, settings.embedding_url)

    def settings_for(self, settings: EngineSettings) -> EngineSettings:
        return settings.model_copy(update={"embedding_model": self.model, "embedding_url": self.url})

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "url": self.url}


def target_digest(ref: ModelRef) -> str:
    """What /health reports of the target model (settings.embedding_digest: the operator computes the same)."""
    return embedding_digest(ref.model, ref.url)


def read_target(path: Path, settings: EngineSettings) -> tuple[ModelRef, int | None]:
    """The target model and its generation from the embedding file (a missing model: the settings'); raises
    ValueError on a bad file."""
    data = json.loads(path.read_text(encoding="utf-8") or "{}")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object with 'model', 'url' and 'generation'")
    url = data.get("url") or None
    model = data.get("model") or settings.embedding_model
    generation = data.get("generation")
    if not isinstance(model, str) or (url is not None and not isinstance(url, str)):
        raise ValueError(f"{path}: 'model' and 'url' must be strings")
    if generation is not None and not isinstance(generation, int):
        raise ValueError(f"{path}: 'generation' must be an integer")
    return ModelRef(model, url.rstrip("/") if url else None), generation


async def watch_target(path: Path, settings: EngineSettings, on_change: Callable[[ModelRef, int | None], Awaitable[None]],
                       every_s: float = 2.0) -> None:
    """Call ``on_change`` when the embedding file names another model or generation (checked every ``every_s``,
    by inode, size and mtime: a ConfigMap volume swaps a symlink). A bad file is logged and ignored."""
    stamp = file_stamp(path)
    current = read_target(path, settings) if stamp else None
    while True:
        await asyncio.sleep(every_s)
        now = file_stamp(path)
        if now is None or now == stamp:
            continue
        stamp = now
        try:
            found = read_target(path, settings)
        except (OSError, ValueError) as exc:
            log.error("embedding file %s not used: %s", path, exc)
            continue
        if found != current:
            current = found
            try:
                await on_change(*found)
            except EngineError as exc:
                log.error("embedding model %r not taken: %s", found[0].key, exc.message)


class EmbedderPool:
    def __init__(self, settings: EngineSettings, target: ModelRef, loaded: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.target = target
        self._models: dict[str, Any] = dict(loaded or {})
        self._owned: set[str] = set()  # models this pool loaded (and closes); injected ones belong to the caller
        self._locks: dict[str, asyncio.Lock] = {}
        self._failed: dict[str, tuple[float, str]] = {}

    @property
    def default(self) -> Any:
        """The target model's embedder (loaded at start)."""
        return self._models[self.target.key]

    def loaded(self, key: str) -> Any | None:
        return self._models.get(key)

    def keys(self) -> list[str]:
        return sorted(self._models)

    async def get(self, key: str) -> Any:
        """The embedder of model ``key``, loading it on first use (once, in a worker thread)."""
        found = self._models.get(key)
        if found is not None:
            return found
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key in self._models:
                return self._models[key]
            failed = self._failed.get(key)
            if failed and time.monotonic() - failed[0] < RETRY_FAILED_S:
                raise ModelUnavailable(f"Embedding model '{key}' cannot be loaded: {failed[1]}")
            try:
                embedder = await asyncio.to_thread(self._build, key)
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
                self._failed[key] = (time.monotonic(), why)
                log.error("embedding model %r cannot be loaded: %s", key, why)
                raise ModelUnavailable(f"Embedding model '{key}' cannot be loaded: {why}") from exc
            self._models[key] = embedder
            self._owned.add(key)
            self._failed.pop(key, None)
            log.info("embedding model %r loaded (dim %d); models held: %s", key, embedder.dim, ", ".join(self.keys()))
            return embedder

    def _build(self, key: str) -> Any:
        from ragengine.embedding.core import build_embedder

        return build_embedder(ModelRef.parse(key).settings_for(self.settings))

    def release_unused(self, used: set[str]) -> None:
        """Close the models this pool loaded that no index version and not the target use any more."""
        for key in [k for k in self._owned if k not in used and k != self.target.key]:
            embedder = self._models.pop(key)
            self._owned.discard(key)
            embedder.close()
            log.info("embedding model %r released (no index version uses it)", key)

    def close(self) -> None:
        for key in list(self._owned):
            self._models.pop(key).close()
        self._owned.clear()
