"""Fixtures: the session store on SQLite and on a real PostgreSQL server, scripted LLMs, one engine.

The engine (embedding model load: tens of seconds on a busy machine) is started once per test run
and shared; tests keep to their own sessions and files, so sharing is safe.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from ragengine.conversations.models import Base
from ragengine.conversations.store import SessionStore
from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app
from tests.support.postgres import postgres_server
from tests.support.server import serve_app

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def pg_url():
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    url = f"sqlite:///{tmp_path / 'sessions.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    st = SessionStore(url)
    if request.param == "postgres":  # one server for the run: start each test from an empty database
        Base.metadata.drop_all(st.engine)
        with st.engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    st.create_tables()
    yield st
    st.close()


@pytest.fixture(scope="session")
def llms():
    primary, secondary = ScriptedLLM(model="scripted"), ScriptedLLM(model="scripted")
    with serve_app(create_scripted_app(primary), ready_path="/health") as p, \
            serve_app(create_scripted_app(secondary), ready_path="/health") as s:
        primary.base, secondary.base = p + "/v1", s + "/v1"
        yield primary, secondary


@pytest.fixture(autouse=True)
def _reset_llms(request):
    yield
    if "llms" in request.fixturenames or "engine" in request.fixturenames:
        for llm in request.getfixturevalue("llms"):
            llm.reset()


class Engine:
    def __init__(self, base: str, app, primary: ScriptedLLM, secondary: ScriptedLLM) -> None:
        self.base, self.app, self.primary, self.secondary = base, app, primary, secondary
        self.http = httpx.Client(base_url=base, timeout=120)


@pytest.fixture(scope="session")
def engine(llms, tmp_path_factory):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    primary, secondary = llms
    settings = EngineSettings(
        data_dir=Path(tmp_path_factory.mktemp("engine")), llm_url=primary.base, llm_fallback_urls=[secondary.base],
        llm_retries=0, max_upload_bytes=200_000, sse_keepalive_s=0.2, session_ttl_s=0,
    )
    app = create_app(settings)
    with serve_app(app, timeout_s=600) as base:
        eng = Engine(base, app, primary, secondary)
        yield eng
        eng.http.close()
