"""The previous release's PostgreSQL data, read by this engine (issue 48): the vector store's schema and the session
store's database written by running that release (hack/previous-release.env, tests/support/previous_release.py).

That release's ``ragengine serve`` on PostgreSQL (vectors in a schema of their own, sessions and uploads in a database
of their own) writes an index with documents and a second version, a session with messages and an uploaded file, and
a vector store (tests/support/upgrade_data.py), and stops, as a replica replaced by a rolling upgrade does. This
engine then starts on the same schema and database and serves all of it as that release did. When the schema, or the
sessions database, carries a revision this engine's migrations do not know (a newer engine migrated it), this engine
refuses to start, naming both revisions, and runs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text

from ragengine.conversations.schema import MIGRATIONS as session_migrations
from ragengine.formats import known_revisions
from ragengine.stores.postgres.store import MIGRATIONS as store_migrations
from tests.support import previous_release
from tests.support.engine_process import engine_process
from tests.support.upgrade_data import as_served_before, refused_start, seed, view

pytestmark = pytest.mark.postgres


@dataclass
class Written:
    settings: dict[str, str]
    seeded: dict[str, Any]
    before: dict[str, Any]


@pytest.fixture(scope="module")
def previous(pgvector_url, tmp_path_factory) -> Iterator[Written]:
    name = f"previous_{os.getpid()}"
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    settings = {"vector_store": "postgres", "vector_store_url": pgvector_url, "vector_store_prefix": name,
                "database_url": pgvector_url.rsplit("/", 1)[0] + f"/{name}"}
    with previous_release.engine_process(tmp_path_factory.mktemp("previous"), settings=settings) as old:
        seeded = seed(old.base_url)
        before = view(old.base_url, seeded)
    yield Written(settings, seeded, before)


def test_this_engine_serves_everything_the_previous_release_wrote_in_postgresql(previous, tmp_path):
    with engine_process(tmp_path, settings=previous.settings) as engine:
        after = view(engine.base_url, previous.seeded)
    assert sorted(after) == sorted(previous.before)
    for key in previous.before:  # one key at a time: a failure names what differs; fields this release adds aside
        assert as_served_before(after[key], previous.before[key]) == previous.before[key], key
    assert [v["state"] for v in after["versions kb"]["versions"]] == ["retired", "live"]


def _revision(url: str, table: str, value: str | None = None) -> tuple[str, list[str]]:
    """The revision in ``table`` (set to ``value`` first, when given) and the tables beside it."""
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    schema = table.split(".")[0] if "." in table else "public"
    with engine.begin() as conn:
        if value is not None:
            conn.execute(text(f"UPDATE {table} SET version_num = :v"), {"v": value})
        revision = conn.execute(text(f"SELECT version_num FROM {table}")).scalar_one()
        tables = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY 1"), {"s": schema})
        out = (revision, list(tables.scalars()))
    engine.dispose()
    return out


def test_this_engine_refuses_schemas_a_newer_engine_migrated_and_runs_nothing(previous, tmp_path):
    settings = previous.settings
    store_table = f'"{settings["vector_store_prefix"]}".alembic_version'
    cases = [(settings["vector_store_url"], store_table, f"the PostgreSQL store's schema '{settings['vector_store_prefix']}'",
              store_migrations),
             (settings["database_url"], "alembic_version", "the session store's database postgresql", session_migrations)]
    (tmp_path / "data").mkdir()
    for url, table, where, migrations in cases:
        # the newest revision *this* engine knows: the schema may still be at the previous release's (under xdist
        # this module's tests can run in different workers, each with its own copy, so none has been upgraded yet)
        newest = known_revisions(migrations)[-1]
        found, _tables = _revision(url, table)
        try:
            state = _revision(url, table, "0099")
            out = refused_start(tmp_path / "data", settings)
            assert where in out and "is at schema revision '0099', which this engine" in out, out[-2000:]
            assert f"migrates up to revision '{newest}'" in out, out[-2000:]
            assert _revision(url, table) == state  # no migration ran
        finally:
            _revision(url, table, found)
