"""Engine test fixtures: apps on real uvicorn servers, once per vector store (the embedding model and the
PostgreSQL server come from the root conftest)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragengine.settings import EngineSettings


@pytest.fixture
def settings(tmp_path: Path) -> EngineSettings:
    return EngineSettings(data_dir=tmp_path / "data")


STORES = ("faiss", "postgres", "milvus")


def pytest_configure(config):
    config.addinivalue_line("markers", "stores(*kinds): run only on these vector stores (default: every store)")


def pytest_generate_tests(metafunc):
    """Every test that starts an engine runs once per vector store, unless it names its stores."""
    if "vector_store" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("stores")
        metafunc.parametrize("vector_store", marker.args if marker else STORES)


@pytest.fixture
def store_settings(vector_store: str, request, store_prefix: str, tmp_path: Path) -> dict:
    """Engine settings that put the indexes in ``vector_store``: a real PostgreSQL with pgvector (a schema
    per test) or a Milvus Lite file; FAISS needs nothing."""
    if vector_store == "postgres":
        return {"vector_store": "postgres", "vector_store_url": request.getfixturevalue("pgvector_url"),
                "vector_store_prefix": store_prefix}
    if vector_store == "milvus":
        return {"vector_store": "milvus", "vector_store_url": str(tmp_path / "milvus.db"),
                "vector_store_prefix": store_prefix}
    return {}


@pytest.fixture
def make_server(embedder, tmp_path: Path, store_settings: dict):
    """``with make_server(**settings) as (base_url, app):`` a real uvicorn server on a free port."""
    from ragengine.app import create_app
    from ragengine.metrics import install_middleware
    from tests.support.server import serve_app

    @contextlib.contextmanager
    def _make(app_state: dict | None = None, **overrides) -> Iterator[tuple[str, object]]:
        overrides.setdefault("data_dir", tmp_path / "data")
        overrides = {**store_settings, **overrides}
        settings = EngineSettings(**overrides)
        app = create_app(settings)
        install_middleware(app, settings)
        app.state.embedder = embedder
        for key, value in (app_state or {}).items():
            setattr(app.state, key, value)
        with serve_app(app) as base:
            yield base, app

    return _make


@pytest.fixture
def server(make_server):
    with make_server() as (base, _app):
        yield base
