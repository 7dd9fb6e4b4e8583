"""The PostgreSQL store's schema revision is its version marker (docs/formats.md): a revision this engine's
migrations do not know (a newer engine migrated the schema) is refused at start, both revisions named, with nothing
run; a replica that already serves the schema keeps serving when it re-opens it after an outage (a newer replica
migrated it during a rolling upgrade). A real PostgreSQL 18 with pgvector."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import text

from ragengine import preflight
from ragengine.formats import NewerFormat
from ragengine.settings import EngineSettings
from ragengine.stores.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres
DIM = 8


def _state(store: PostgresStore) -> tuple[list, list]:
    with store.engine.connect() as conn:
        tables = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY 1"),
                              {"s": store.schema}).scalars().all()
        revision = conn.execute(text(f'SELECT version_num FROM "{store.schema}".alembic_version')).scalars().all()
    return list(tables), list(revision)


def test_a_schema_a_newer_engine_migrated_is_refused_at_start_and_kept_by_a_serving_replica(
        pgvector_url, store_prefix, tmp_path, caplog):
    serving = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM)
    serving.open()
    with serving.engine.begin() as conn:
        conn.execute(text(f'UPDATE "{store_prefix}".alembic_version SET version_num = \'0099\''))
    state = _state(serving)
    message = rf"the PostgreSQL store's schema '{store_prefix}' is at schema revision '0099', which this engine .* " \
              r"migrates up to revision '0004'"
    starting = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM)
    with pytest.raises(NewerFormat, match=message):
        starting.open()
    starting.close()
    settings = EngineSettings(data_dir=tmp_path / "data", vector_store="postgres", vector_store_url=pgvector_url,
                              vector_store_prefix=store_prefix)
    with pytest.raises(NewerFormat, match=message):
        preflight.check(settings)  # what the engine runs before anything starts
    with caplog.at_level(logging.WARNING, logger="ragengine.stores.postgres.store"):
        serving.open()  # a re-open after an outage: it keeps serving, unmigrated
    assert "keeps serving on it until it is replaced" in caplog.text
    serving.ping()
    assert _state(serving) == state  # nothing ran
    serving.close()
