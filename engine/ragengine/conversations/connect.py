"""The session store's SQLAlchemy engine for a URL: SQLite with the pragmas its cascades, concurrent readers and
durability need, or PostgreSQL through psycopg 3. Used by the store (``database.py``) and by the schema's check
and migrations (``schema.py``), which the store runs: its own module, so neither imports the other for it."""

from __future__ import annotations

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record) -> None:  # cascades and concurrent readers need these on SQLite
            cur = conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            # FULL: the WAL is fsync'ed at every commit, so an acknowledged message survives a power loss
            # (NORMAL syncs only at checkpoints: kill -9 loses nothing, a power cut loses recent commits).
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

        return engine
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]  # psycopg 3, not the absent psycopg2
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
