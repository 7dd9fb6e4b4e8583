"""Each index's HNSW index on PostgreSQL: built in one pass over the index's table, never row by row.

An index's table (``schema.leaf_name``) is searched exactly until it holds more than ``threshold`` chunks.
Past that, ``HnswUpkeep`` builds its HNSW index (``CREATE INDEX CONCURRENTLY``: writes go on):

- ``maintain(quiet_s)``, run by the registry every few seconds, builds it for each table whose writes have
  paused for ``quiet_s``, read from the server's statistics, so writes through any replica count;
- ``finish_load(leaf, rows)``, called at the end of a bulk load (a version built), builds it at once.

One replica builds a table at a time (an advisory lock); the others skip it. A build cut off midway
leaves an invalid index, which the next build drops first. ``cancel()`` stops a running build (the engine
is shutting down; the next start builds again). Each build or finished load ends with VACUUM (ANALYZE): the
statistics, for the planner and the keyword leg (``analyzed(leaf)`` is told), and the visibility map and hint
bits of every row loaded, set once here rather than by the first searches that read each page and by an
autovacuum that would start during them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import func, literal, select, text
from sqlalchemy.engine import Connection, Engine

from ragengine.stores.postgres.connection import driver, store_errors
from ragengine.stores.postgres.schema import hnsw_ddl, hnsw_name

log = logging.getLogger(__name__)
# Chunks an index holds before it gets an HNSW index; below, exact search (bench/bench_stores.py: 20 ms at
# 10k chunks, 106 ms at 50k; HNSW under 1 ms).
HNSW_THRESHOLD = 10_000
# The leaves (index tables) without a valid HNSW index, with the statistics' row estimate and write count.
PENDING = text(
    "SELECT c.relname AS leaf, coalesce(s.n_live_tup, 0) AS live, coalesce(s.n_tup_ins + s.n_tup_del, 0) AS changes "
    "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
    "JOIN pg_namespace n ON n.oid = p.relnamespace LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
    "WHERE n.nspname = :schema AND p.relkind = 'p' AND p.relname ~ '^chunks(_d[0-9]+)?$' AND NOT EXISTS ("
    "SELECT 1 FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid "
    "WHERE x.indrelid = c.oid AND x.indisvalid AND ic.relname = c.relname || '_hnsw')")
# The backends building a given HNSW index (on any replica): a DROP of its table must not wait on them.
BUILDS_OF = text(
    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND query ILIKE 'CREATE INDEX CONCURRENTLY%' AND strpos(query, :index) > 0")
INVALID = text(
    "SELECT 1 FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid JOIN pg_namespace n ON "
    "n.oid = ic.relnamespace WHERE n.nspname = :s AND ic.relname = :i AND NOT x.indisvalid")


class HnswUpkeep:
    def __init__(self, engine: Callable[[], Engine], schema: str, *, m: int, ef_construction: int,
                 threshold: int = HNSW_THRESHOLD, build_memory_mb: int = 1024,
                 analyzed: Callable[[str], None] = lambda _leaf: None) -> None:
        self.engine, self.schema = engine, schema
        self.m, self.ef_construction = m, ef_construction
        self.threshold = threshold
        self.build_memory_mb = build_memory_mb  # maintenance_work_mem of a build: the graph fits, or it crawls
        self.analyzed = analyzed
        self._writes_seen: dict[str, tuple[int, float]] = {}  # leaf -> (write count, since)
        self._building: int | None = None  # the backend pid of a running build

    def maintain(self, quiet_s: float = 10.0) -> list[str]:
        """Build every pending table over the threshold whose writes paused for ``quiet_s``; returns them."""
        now = time.monotonic()
        with store_errors(), self.engine().connect() as conn:
            pending = conn.execute(PENDING, {"schema": self.schema}).all()
        built = []
        for leaf, live, changes in pending:
            seen = self._writes_seen.get(leaf)
            if live <= self.threshold or seen is None or seen[0] != changes:
                self._writes_seen[leaf] = (changes, now)
            elif now - seen[1] >= quiet_s and self._build(leaf, live):
                built.append(leaf)
        return built

    def finish_load(self, leaf: str, rows: int) -> bool:
        """After a bulk load of ``rows`` chunks into ``leaf``: its HNSW index now if over the threshold, else
        its statistics only. True when the HNSW index was built (or already there)."""
        if rows > self.threshold:
            return self._build(leaf, rows)
        with store_errors(), self.engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            driver(conn).execute(self._vacuum(leaf))
        self.analyzed(leaf)
        return False

    def stop_builds(self, conn: Connection, leaf: str) -> int:
        """Cancel every running build of ``leaf``'s HNSW index, this replica's or another's, in the transaction
        that drops the table. A build waits for older transactions (the drop's) to end while the DROP waits
        for the build's lock: PostgreSQL would end one of them, the drop as likely as not, as a deadlock."""
        stopped = len(conn.execute(BUILDS_OF, {"index": f'"{hnsw_name(leaf)}"'}).all())
        # Until the drop commits: wait for a cancelled build to let go, and let no new one start.
        conn.execute(select(func.pg_advisory_xact_lock(self._key(leaf))))
        return stopped

    def _vacuum(self, leaf: str) -> sql.Composed:
        return sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(self.schema, leaf))

    def _key(self, leaf: str) -> Any:
        """The advisory lock of ``leaf``'s builds: one replica builds it at a time."""
        return select(func.hashtext(literal(f"ragengine-hnsw:{self.schema}:{leaf}")).label("key")).scalar_subquery()

    def cancel(self) -> None:
        if self._building is not None:
            with store_errors(), self.engine().connect() as conn:
                conn.execute(select(func.pg_cancel_backend(self._building)))

    def _build(self, leaf: str, rows: int) -> bool:
        lock = self._key(leaf)
        index = sql.Identifier(self.schema, hnsw_name(leaf))
        with store_errors(), self.engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            if not conn.execute(select(func.pg_try_advisory_lock(lock))).scalar():
                return False  # another replica builds it
            raw = driver(conn)
            try:
                # A build killed midway leaves an invalid index behind: drop it, or IF NOT EXISTS would keep it.
                if conn.execute(INVALID, {"s": self.schema, "i": hnsw_name(leaf)}).first() is not None:
                    raw.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(index))
                raw.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(f"{self.build_memory_mb}MB")))
                log.info("building the HNSW index of %s.%s (%d chunks)", self.schema, leaf, rows)
                start, self._building = time.monotonic(), raw.info.backend_pid
                raw.execute(hnsw_ddl(self.schema, leaf, self.m, self.ef_construction))
                log.info("built the HNSW index of %s.%s in %.1f s", self.schema, leaf, time.monotonic() - start)
                raw.execute(self._vacuum(leaf))
                self.analyzed(leaf)
                return True
            except psycopg.errors.UndefinedTable:
                return False  # the index was dropped meanwhile
            finally:
                self._building = None
                raw.execute("RESET maintenance_work_mem")
                conn.execute(select(func.pg_advisory_unlock(lock)))

