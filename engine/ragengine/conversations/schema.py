"""The session store's schema under alembic migrations (``migrations/``), applied at start-up.

``create_all`` never alters a table that exists, so a new column would silently be missing on every
database made by an earlier release. ``upgrade(engine)`` brings any database to the current revision:
an empty one is made from the models and stamped at the newest revision (the migrations make the same
schema: a test compares them); one made by ``create_all`` before migrations existed (its tables are
there, alembic's version table is not) is stamped at the baseline revision ``0001`` and upgraded from
there; one at an older revision is migrated. Only those two import alembic: a start that has nothing
to migrate does not (docs/performance.md). On PostgreSQL an advisory lock makes replicas that start
together migrate once.

The revision in ``alembic_version`` is the schema's version marker (ragengine.formats): a revision these migrations
do not know was made by a newer engine, and is refused (``FormatRefused``, both revisions named) before anything runs:
by ``check(url)``, which only reads, before the engine starts anything, and again by ``upgrade`` under its lock.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table, create_engine, func, inspect, literal, select
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from ragengine import formats
from ragengine.conversations.connect import make_engine

MIGRATIONS = Path(__file__).parent / "migrations"
BASELINE = "0001"
# alembic's own version table, as alembic.runtime.migration defines it: what a stamp writes
VERSION_TABLE = Table("alembic_version", MetaData(), Column("version_num", String(32), nullable=False),
                      PrimaryKeyConstraint("version_num", name="alembic_version_pkc"))


def _config(conn: Connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def upgrade(engine: Engine) -> None:
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(literal("ragengine:sessions")))))
        revision = formats.check_schema(conn, where(engine.url), MIGRATIONS)
        head = formats.known_revisions(MIGRATIONS)[-1]
        if revision == head:
            return  # nothing to migrate: alembic is not even imported (docs/performance.md)
        tables = set(inspect(conn).get_table_names())
        if revision is None and "conv_sessions" not in tables:
            _create(conn, tables, head)
            return
        from alembic import command

        if "alembic_version" not in tables:
            command.stamp(_config(conn), BASELINE)
        command.upgrade(_config(conn), "head")


def _create(conn: Connection, tables: set[str], head: str) -> None:
    """An empty database: the models' tables, stamped at the newest revision (alembic's recipe for a database built
    from scratch; tests/conversations/test_migrations.py checks that the migrations make the same schema). A
    database holding some of the tables but not the first migration's is left to the migrations, which refuse it."""
    from ragengine.conversations.models import Base

    if tables & set(Base.metadata.tables):
        from alembic import command

        command.upgrade(_config(conn), "head")
        return
    Base.metadata.create_all(conn)
    VERSION_TABLE.create(conn)
    conn.execute(VERSION_TABLE.insert().values(version_num=head))


def where(url: URL) -> str:
    """The database as messages name it: its file, or its URL without the password."""
    name = url.database if url.get_backend_name() == "sqlite" else url.render_as_string(hide_password=True)
    return f"the session store's database {name}"


def check(url: str) -> None:
    """Refuse (``FormatRefused``) a session store this engine's migrations do not know; reads only, and writes
    nothing: SQLite is opened read-only. A database not made yet, or one that cannot be reached now, is left to
    ``upgrade`` (which checks again, and reports an unreachable server as it always has)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or ":memory:")
        if not path.is_file():
            return
        # Stopped cleanly, the database is its file alone (the WAL checkpointed and removed): read as immutable, which
        # creates no -wal or -shm beside it. A WAL left by a crash is read too (read-only), as any start reads it.
        wal = Path(f"{path}-wal").exists()
        engine = create_engine(f"sqlite:///file:{quote(str(path.resolve()))}?{'mode=ro' if wal else 'immutable=1'}&uri=true")
    else:
        engine = make_engine(url)
    try:
        with engine.connect() as conn:
            formats.check_schema(conn, where(parsed), MIGRATIONS)
    except DBAPIError:
        return
    finally:
        engine.dispose()


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
