"""The session store's schema under alembic migrations (``migrations/``), applied at start-up.

``create_all`` never alters a table that exists, so a new column would silently be missing on every
database made by an earlier release. ``upgrade(engine)`` brings any database to the current revision:
an empty one is created by the migrations; one made by ``create_all`` before migrations existed (its
tables are there, alembic's version table is not) is stamped at the baseline revision ``0001`` and
upgraded from there. On PostgreSQL an advisory lock makes replicas that start together migrate once.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, inspect, literal, select
from sqlalchemy.engine import Connection, Engine

MIGRATIONS = Path(__file__).parent / "migrations"
BASELINE = "0001"


def _config(conn: Connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def upgrade(engine: Engine) -> None:
    from alembic import command

    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(literal("ragengine:sessions")))))
        tables = set(inspect(conn).get_table_names())
        if "conv_sessions" in tables and "alembic_version" not in tables:
            command.stamp(_config(conn), BASELINE)
        command.upgrade(_config(conn), "head")


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
