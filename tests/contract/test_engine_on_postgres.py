"""The engine as deployed with ``database_url`` on a real PostgreSQL, end to end (issue 16 item 7).

A real ``ragengine serve`` process per URL form the docs name (docs/conversations.md:
``postgresql://user:pass@host/db``; the SQLAlchemy form ``postgresql+psycopg://``, which the chart's
Secret may hold too; ``postgres://`` as libpq spells it), and concurrent HTTP clients writing. Each
writer's messages must all be stored, with their content, in the order it sent them, alternating
user / assistant, and the rows must be in PostgreSQL (not an SQLite file on the data volume).
"""

from __future__ import annotations

import threading

import httpx
import psycopg
import pytest

from tests.support.engine_process import engine_process
from tests.support.postgres import postgres_server

WRITERS = 6
MESSAGES_PER_WRITER = 4

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        yield url


def _database(pg_url: str, name: str) -> str:
    """A fresh database on the server; returns its libpq DSN (``postgresql://...``)."""
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return dsn.rsplit("/", 1)[0] + f"/{name}"


def _write(base: str, session_id: str, writer: int, errors: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=120) as client:
        for i in range(MESSAGES_PER_WRITER):
            resp = client.post(f"/v1/sessions/{session_id}/messages", json={"content": f"writer {writer} message {i}",
                                                                              "mode": "none"})
            if resp.status_code != 200:
                errors.append(f"writer {writer} message {i}: {resp.status_code} {resp.text}")


@pytest.mark.parametrize("form", ["postgresql://", "postgresql+psycopg://", "postgres://"])
def test_engine_serves_sessions_from_postgres_with_concurrent_writers(pg_url, tmp_path, form):
    dsn = _database(pg_url, "e2e_" + form.split(":")[0].replace("+", "_"))
    url = form + dsn.split("://", 1)[1]
    with engine_process(tmp_path, settings={"database_url": url}) as engine:
        base = engine.base_url
        sessions = [httpx.post(f"{base}/v1/sessions", json={"user_id": f"writer-{w}"}, timeout=60).json()["id"]
                    for w in range(WRITERS)]
        errors: list[str] = []
        threads = [threading.Thread(target=_write, args=(base, sessions[w], w, errors)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors

        for w, session_id in enumerate(sessions):
            history = httpx.get(f"{base}/v1/sessions/{session_id}/messages", timeout=60).json()["data"]
            assert [m["role"] for m in history] == ["user", "assistant"] * MESSAGES_PER_WRITER
            users = [m["content"] for m in history if m["role"] == "user"]
            assert users == [f"writer {w} message {i}" for i in range(MESSAGES_PER_WRITER)]
            answers = [m["content"] for m in history if m["role"] == "assistant"]
            assert all(f"writer {w} message {i}" in a for i, a in enumerate(answers)), answers  # the test LLM echoes
        listed = httpx.get(f"{base}/v1/sessions", params={"limit": 100}, timeout=60).json()["data"]
        assert {s["id"] for s in listed} == set(sessions)

    # The rows are in PostgreSQL, in each session's sending order; nothing went to an SQLite file.
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT session_id, content FROM conv_messages WHERE role = 'user' ORDER BY seq").fetchall()
    assert len(rows) == WRITERS * MESSAGES_PER_WRITER
    for w, session_id in enumerate(sessions):
        assert [c for s, c in rows if s == session_id] == [f"writer {w} message {i}" for i in range(MESSAGES_PER_WRITER)]
    assert not (engine.data_dir / "sessions.db").exists()
