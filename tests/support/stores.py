"""Engine settings that put the indexes in each vector store, shared by every test package that runs its
black-box tests over the three stores (``tests/engine``, ``tests/chat``, ``tests/conversations``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

STORES = ("faiss", "postgres", "milvus")
# In a module whose tests default to one store (``pytestmark = ON_FAISS``), the tests that exercise the
# store (retrieval into the context, filters, unknown indexes) run on all three.
EVERY_STORE = pytest.mark.stores(*STORES)
ON_FAISS = pytest.mark.stores("faiss")


def store_values(kind: str, *, prefix: str, work_dir: Path, pg_url: Callable[[], str]) -> dict:
    """A real PostgreSQL with pgvector (a schema per ``prefix``; ``pg_url`` starts the server on first use),
    a Milvus Lite file under ``work_dir`` (one process's file: one per engine), or FAISS (nothing)."""
    if kind == "postgres":
        return {"vector_store": "postgres", "vector_store_url": pg_url(), "vector_store_prefix": prefix}
    if kind == "milvus":
        return {"vector_store": "milvus", "vector_store_url": str(work_dir / "milvus.db"), "vector_store_prefix": prefix}
    if kind != "faiss":
        raise ValueError(f"unknown vector store {kind!r}")
    return {}

