"""The session store's schema under alembic, on SQLite and on a real PostgreSQL: a new database is made from
the models and stamped at the head, and is the schema the migrations make; a database made by the earlier
``create_all`` is adopted (stamped at the baseline and upgraded) with its data intact."""

from __future__ import annotations

import itertools

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text

from ragengine.conversations import schema
from ragengine.conversations.connect import make_engine
from ragengine.conversations.models import Base
from ragengine.conversations.store import SessionStore

_dbs = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sessions.db'}"
    admin = request.getfixturevalue("pgvector_url")
    name = f"sessions_{next(_dbs)}_{tmp_path.name[-8:].replace('-', '_').lower()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin.rsplit("/", 1)[0] + f"/{name}"


def head() -> str:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(schema.MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def _schema(engine) -> dict:
    """Everything the inspector reads of each table: columns (type, nullability, default), keys, indexes."""
    from sqlalchemy import inspect

    with engine.connect() as conn:
        inspector = inspect(conn)
        return {table: {
            "columns": [(c["name"], str(c["type"]), c["nullable"], str(c.get("default"))) for c in inspector.get_columns(table)],
            "pk": inspector.get_pk_constraint(table)["constrained_columns"],
            "fks": sorted((fk["constrained_columns"], fk["referred_table"], fk["referred_columns"],
                           fk.get("options", {}).get("ondelete")) for fk in inspector.get_foreign_keys(table)),
            "indexes": sorted((i["name"], i["column_names"], bool(i["unique"])) for i in inspector.get_indexes(table)),
            "unique": sorted((u["column_names"]) for u in inspector.get_unique_constraints(table)),
        } for table in sorted(inspector.get_table_names()) if table != "alembic_version"}


def test_new_database_made_from_the_models_is_the_schema_the_migrations_make(url):
    """An empty database is made from the models and stamped at the head (no alembic at start-up); the migrations,
    which upgrade every older database, must make exactly that schema, and agree with the models."""
    store = SessionStore(url)
    store.create_tables()
    assert schema.current_revision(store.engine) == head()
    migrated = make_engine(url.replace("sessions.db", "migrated.db") if url.startswith("sqlite") else _another_database(url))
    with migrated.begin() as conn:
        command.upgrade(schema._config(conn), "head")
    with migrated.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"the migrations and the models disagree: {diff}"
    assert _schema(store.engine) == _schema(migrated)
    assert schema.current_revision(migrated) == head()
    migrated.dispose()
    with store.engine.begin() as conn:  # alembic takes the stamp as its own: nothing left to upgrade
        command.upgrade(schema._config(conn), "head")
    store.create_tables()  # idempotent: a second start changes nothing
    assert schema.current_revision(store.engine) == head()
    store.close()


def _another_database(url: str) -> str:
    name = f"migrated_{next(_dbs)}"
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + f"/{name}"


def test_known_revisions_read_as_text_are_alembics():
    """formats.known_revisions reads the scripts' revision lines instead of importing alembic: the same list, oldest
    first, for both migration folders."""
    from alembic.config import Config

    from ragengine.formats import known_revisions
    from ragengine.stores.postgres.store import MIGRATIONS

    for folder in (schema.MIGRATIONS, MIGRATIONS):
        cfg = Config()
        cfg.set_main_option("script_location", str(folder))
        walked = [r.revision for r in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions()))]
        assert known_revisions(folder) == walked and len(walked) >= 4


async def test_database_from_create_all_is_adopted_with_its_data(url):
    legacy = create_engine(SessionStore(url).engine.url)
    with legacy.begin() as conn:  # what the store's create_all made before it had migrations: 0001's tables
        command.upgrade(schema._config(conn), schema.BASELINE)
        conn.execute(text("DROP TABLE alembic_version"))
    with legacy.begin() as conn:
        conn.execute(text("INSERT INTO conv_sessions (id, metadata, created_at, updated_at) "
                          "VALUES ('s_old', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"))
    legacy.dispose()
    store = SessionStore(url)
    store.create_tables()
    assert schema.current_revision(store.engine) == head()
    assert (await store.get_session("s_old")).id == "s_old"
    store.close()


def _tables(engine) -> list[str]:
    from sqlalchemy import inspect

    with engine.connect() as conn:
        return sorted(inspect(conn).get_table_names())


def test_a_database_a_newer_engine_migrated_is_refused_and_left_as_it_is(url):
    """The revision is the schema's version marker: one these migrations do not know is refused, both revisions
    named, before any migration runs (by the start's read-only check and by the migration itself)."""
    from ragengine.formats import DamagedMarker, NewerFormat

    store = SessionStore(url)
    store.create_tables()
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    tables = _tables(store.engine)
    message = rf"is at schema revision '0099', which this engine .* migrates up to revision '{head()}'"
    with pytest.raises(NewerFormat, match=message):
        schema.check(url)
    with pytest.raises(NewerFormat, match=message):
        store.create_tables()
    assert schema.current_revision(store.engine) == "0099" and _tables(store.engine) == tables
    with store.engine.begin() as conn:  # two revisions, then none: damaged, not guessed at
        conn.execute(text(f"UPDATE alembic_version SET version_num = '{head()}'"))
        conn.execute(text("INSERT INTO alembic_version (version_num) VALUES ('0002')"))
    with pytest.raises(DamagedMarker, match="holds 2 revisions"):
        store.create_tables()
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM alembic_version"))
    with pytest.raises(DamagedMarker, match="holds 0 revisions"):
        schema.check(url)
    store.close()
