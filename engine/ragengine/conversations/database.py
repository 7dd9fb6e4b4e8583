"""The session store's database: a synchronous SQLAlchemy engine run in the store's own bounded
thread pool, behind one async call (``SqlStore._run``: a function of a transaction).

The same code path for SQLite and PostgreSQL (psycopg 3), no async driver needed, and a slow database
never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sqlalchemy.orm import Session, sessionmaker

from ragengine.conversations.connect import make_engine

T = TypeVar("T")


class SqlStore:
    """The engine, its transactions and the thread pool they run in; the store's parts build on ``_run``."""

    def __init__(self, url: str, *, threads: int = 8) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Its own bounded executor, not the loop's default one: six slow uploads once held every default
        # thread and GET /v1/sessions waited 30 s behind them (issue 22).
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="session-store")

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def create_tables(self) -> None:
        """Create or upgrade the schema (alembic migrations; see ``schema.py``)."""
        from ragengine.conversations.schema import upgrade

        upgrade(self.engine)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.engine.dispose()

    async def _run(self, fn: Callable[[Session], T]) -> T:
        def work() -> T:
            with self._sessions.begin() as s:
                return fn(s)
        context = contextvars.copy_context()  # as asyncio.to_thread does
        return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, work)
