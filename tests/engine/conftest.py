"""Engine test fixtures: apps on real uvicorn servers, once per vector store (the embedding model, the
PostgreSQL server and the parametrisation over the stores come from the root conftest)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragengine.settings import EngineSettings


@pytest.fixture
def settings(tmp_path: Path) -> EngineSettings:
    return EngineSettings(data_dir=tmp_path / "data")


@pytest.fixture
def make_server(embedder, tmp_path: Path, store_settings: dict):
    """``with make_server(**settings) as (base_url, app):`` a real uvicorn server on a free port."""
    from ragengine.app import create_app
    from ragengine.metrics import install_middleware
    from tests.support.embedding import borrowed
    from tests.support.server import serve_app

    @contextlib.contextmanager
    def _make(app_state: dict | None = None, **overrides) -> Iterator[tuple[str, object]]:
        overrides.setdefault("data_dir", tmp_path / "data")
        overrides = {**store_settings, **overrides}
        settings = EngineSettings(**overrides)
        app = create_app(settings)
        install_middleware(app, settings)
        for key, value in (app_state or {}).items():
            setattr(app.state, key, value)
        with borrowed(embedder) as own:
            app.state.embedder = own
            with serve_app(app) as base:
                yield base, app

    return _make


@pytest.fixture
def server(make_server):
    with make_server() as (base, _app):
        yield base
