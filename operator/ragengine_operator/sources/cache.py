"""The git cache on disk: where each source's clone lives, and when it goes.

Layout: ``<root>/<namespace>/<ragengine>/<source>/<digest of the URL>``. Keying on the URL means an
edited URL never fetches into another repository's objects; the clone of the old URL is removed at
the next sync. A source that leaves the spec, and a RAGEngine that goes away, lose their folders.
After each sync the whole cache is held under a size budget: the least recently used clones go first
(losing one costs one fetch). Clones in use by a running sync are never removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

_busy: set[Path] = set()
_lock = threading.Lock()


def clone_dir(engine_dir: Path, source: str, url: str) -> Path:
    """``engine_dir`` is ``<root>/<namespace>/<ragengine>``."""
    return engine_dir / source / hashlib.sha256(url.encode()).hexdigest()[:16]


def root_of(engine_dir: Path) -> Path:
    return engine_dir.parent.parent


@contextlib.contextmanager
def using(path: Path) -> Iterator[Path]:
    """Mark ``path`` in use for the duration (never removed meanwhile); other URLs' clones of the same
    source are removed first."""
    with _lock:
        _busy.add(path)
    try:
        parent = path.parent
        if parent.is_dir():
            for other in parent.iterdir():
                if other != path and other not in _busy:
                    shutil.rmtree(other, ignore_errors=True)
        yield path
    finally:
        with _lock:
            _busy.discard(path)
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used, for the budget


def remove(root: Path, *parts: str) -> None:
    """Remove a source's (namespace, name, source) or a RAGEngine's (namespace, name) clones."""
    target = root.joinpath(*parts)
    with _lock:
        if any(b == target or target in b.parents for b in _busy):
            return
    shutil.rmtree(target, ignore_errors=True)


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def clones(root: Path) -> list[Path]:
    return [p for p in root.glob("*/*/*/*") if p.is_dir()]


def enforce_budget(root: Path, max_bytes: int) -> list[Path]:
    """Remove the least recently used clones until the cache holds at most ``max_bytes``; the removed."""
    found = [(p.stat().st_mtime, p, _size(p)) for p in clones(root)]
    total = sum(size for _, _, size in found)
    removed = []
    for _, path, size in sorted(found, key=lambda x: x[0]):
        if total <= max_bytes:
            break
        with _lock:
            if path in _busy:
                continue
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        removed.append(path)
    return removed


def sweep(root: Path, live: set[tuple[str, str]]) -> None:
    """Remove the folders of RAGEngines that are not in ``live`` (gone while the operator was down)."""
    for folder in root.glob("*/*"):
        if folder.is_dir() and (folder.parent.name, folder.name) not in live:
            remove(root, folder.parent.name, folder.name)
