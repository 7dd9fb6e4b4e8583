"""Engine test fixtures: one embedding model per session, apps on real uvicorn servers."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragengine.settings import EngineSettings


@pytest.fixture(scope="session")
def embedder():
    """The real packaged all-MiniLM-L6-v2, loaded once for the whole session."""
    from ragengine.embedding import build_embedder

    emb = build_embedder(EngineSettings())
    yield emb
    emb.close()


@pytest.fixture
def settings(tmp_path: Path) -> EngineSettings:
    return EngineSettings(data_dir=tmp_path / "data")


@pytest.fixture
def make_server(embedder, tmp_path: Path):
    """``with make_server(**settings) as (base_url, app):`` a real uvicorn server on a free port."""
    from ragengine.app import create_app
    from ragengine.metrics import install_middleware
    from tests.support.server import serve_app

    @contextlib.contextmanager
    def _make(app_state: dict | None = None, **overrides) -> Iterator[tuple[str, object]]:
        overrides.setdefault("data_dir", tmp_path / "data")
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
