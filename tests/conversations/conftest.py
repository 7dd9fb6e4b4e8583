"""Fixtures: the session store on SQLite and on a real PostgreSQL server, scripted LLMs, one engine per
vector store.

Each engine (on the run's one loaded embedding model, borrowed) is started once per test run and
shared; tests keep to their own sessions and files, so sharing is safe. The HTTP tests run on every
vector store (the root conftest's ``vector_store`` parametrisation).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import text

from ragengine.conversations.models import Base
from ragengine.conversations.store import SessionStore
from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app
from tests.support.embedding import borrowed
from tests.support.server import serve_app
from tests.support.stores import store_values

_databases = itertools.count()


@pytest.fixture(scope="session")
def pg_url(pgvector_url):
    """A database of the store tests' own on the run's PostgreSQL server."""
    return fresh_database(pgvector_url)


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
def engines(llms, embedder, tmp_path_factory, request):
    """``engines(store)``: the engine on that vector store, started on first use and shared by the run's
    tests. On ``postgres`` the sessions and the upload queue live in the same (fresh) database as the
    indexes, as the operator deploys it; elsewhere in the engine's SQLite file."""
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    primary, secondary = llms
    running: dict[str, Engine] = {}
    with contextlib.ExitStack() as stack:
        def get(store: str) -> Engine:
            if store in running:
                return running[store]
            data_dir = Path(tmp_path_factory.mktemp(f"engine-{store}"))
            values = store_values(store, prefix=f"conv{os.getpid()}", work_dir=data_dir,
                                  pg_url=lambda: fresh_database(request.getfixturevalue("pgvector_url")))
            if store == "postgres":
                values["database_url"] = values["vector_store_url"]
            settings = EngineSettings(
                data_dir=data_dir, llm_url=primary.base, llm_fallback_urls=[secondary.base], llm_retries=0,
                max_upload_bytes=200_000, sse_keepalive_s=0.2, session_ttl_s=0, **values,
            )
            app = create_app(settings)
            app.state.embedder = stack.enter_context(borrowed(embedder))
            base = stack.enter_context(serve_app(app))
            eng = running[store] = Engine(base, app, primary, secondary)
            stack.callback(eng.http.close)
            return eng

        yield get


@pytest.fixture
def engine(engines, vector_store) -> Engine:
    return engines(vector_store)


def backdate(store: SessionStore, row_class, row_id: str, hours: float = 1.0) -> None:
    """Make a session or file look untouched for ``hours`` (its updated_at moved back): TTL tests need an
    idle row, not a sleep past a one-second TTL."""
    from datetime import timedelta

    from sqlalchemy import update

    from ragengine.conversations.models import utcnow

    with store.engine.begin() as conn:
        conn.execute(update(row_class).where(row_class.id == row_id).values(updated_at=utcnow() - timedelta(hours=hours)))


def fresh_database(admin_url: str) -> str:
    """A new database on the test server (the sessions' tables live in its public schema)."""
    # unique across module instances: pytest loads this conftest, and other packages import it again
    name = f"conv_{os.getpid()}_{next(_databases)}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + f"/{name}"
