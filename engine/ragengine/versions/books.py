"""Where the version books are kept: one JSON file per index beside the FAISS indexes, or a row in the
external store (PostgreSQL: ``index_versions``, under a transaction-scoped advisory lock per book, so
replicas never lose each other's changes; Milvus: ``<prefix>_versions``, serialised per process).

Both offer ``all()`` and ``update(name, change)``: ``change`` gets the book as stored (a dict, or None)
and returns the new one (None deletes it); it may raise to leave the book as it was.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from ragengine.index import disk
from ragengine.index.journal import fsync_dir
from ragengine.stores.base import StoreAdapter

Change = Callable[[dict | None], dict | None]


class Books(Protocol):
    async def all(self) -> dict[str, dict]: ...
    async def get(self, name: str) -> dict | None: ...
    async def update(self, name: str, change: Change) -> dict | None: ...


class FileBooks:
    """``<data_dir>/versions/<quoted name>.json``, written to a temporary file, fsynced, renamed."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "versions"
        self._lock = asyncio.Lock()

    def _path(self, name: str) -> Path:
        return self.root / f"{disk.dir_name(name)}.json"

    def _read_all(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        if not self.root.is_dir():
            return out
        for path in sorted(self.root.glob("*.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            out[data["name"]] = data
        return out

    async def all(self) -> dict[str, dict]:
        return await asyncio.to_thread(self._read_all)

    async def get(self, name: str) -> dict | None:
        path = self._path(name)
        return await asyncio.to_thread(lambda: json.loads(path.read_text(encoding="utf-8")) if path.exists() else None)

    def _write(self, name: str, data: dict | None) -> None:
        path = self._path(name)
        if data is None:
            if path.exists():
                path.unlink()
                fsync_dir(self.root)
            return
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(self.root)

    async def update(self, name: str, change: Change) -> dict | None:
        async with self._lock:
            new = change(await self.get(name))
            await asyncio.to_thread(self._write, name, new)
            return new


class StoreBooks:
    """The books in the external store, through its adapter (``books``, ``book_update``)."""

    def __init__(self, adapter: StoreAdapter, call: Callable[..., Awaitable[Any]]) -> None:
        self.adapter = adapter
        self._call = call  # StoreRegistry.call: the adapter in a thread, a store outage as a 503

    async def all(self) -> dict[str, dict]:
        return await self._call(self.adapter.books)

    async def get(self, name: str) -> dict | None:
        return (await self._call(self.adapter.books)).get(name)

    async def update(self, name: str, change: Change) -> dict | None:
        return await self._call(self.adapter.book_update, name, change)
