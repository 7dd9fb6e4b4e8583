"""Before the engine starts anything: every persistent format it would open is one it reads (docs/formats.md).

``check(settings)`` only reads: the data folder's marker, the session store's schema revision and, on PostgreSQL,
the vector store's. Data a newer engine wrote, or a damaged marker, raises ``FormatRefused`` naming the file or
database and both versions, before any part of the engine has started: the folder and the databases are left
exactly as they were (no writer lock taken, no migration run, no snapshot written at shutdown). Each part checks
again under its own lock before it upgrades anything (the data folder under the writer lock, each schema under its
advisory lock), so an engine that upgraded the data meanwhile is caught there too.

``prepare(settings)`` checks, then brings the data folder to this engine's format when no FAISS store does it under
its writer lock (an external store's engine keeps only uploads, the SQLite sessions and the model cache there).
"""

from __future__ import annotations

import asyncio
import logging

from ragengine import formats
from ragengine.conversations import schema as sessions_schema
from ragengine.settings import EngineSettings

log = logging.getLogger(__name__)


def check(settings: EngineSettings) -> None:
    formats.read_data_version(settings.data_dir)
    sessions_schema.check(settings.sessions_url)
    if settings.vector_store == "postgres" and settings.vector_store_url:
        _check_store_schema(settings.vector_store_url, settings.vector_store_prefix)


def _check_store_schema(url: str, schema: str) -> None:
    """The PostgreSQL store's schema revision, read only; a server that does not answer now is left to the store,
    which reports it on /health and keeps trying (and checks the revision when it connects)."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import DBAPIError

    from ragengine.stores.postgres.store import MIGRATIONS, schema_label, sqlalchemy_url

    engine = create_engine(sqlalchemy_url(url), connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            formats.check_schema(conn, schema_label(schema), MIGRATIONS, schema=schema)
    except DBAPIError:
        return
    finally:
        engine.dispose()


async def prepare(settings: EngineSettings) -> None:
    """``check``, then the data folder's upgrade when the FAISS store does not own the folder."""
    await asyncio.to_thread(check, settings)
    if settings.vector_store != "faiss":
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        found = await asyncio.to_thread(formats.upgrade_data_dir, settings.data_dir)
        if found < formats.DATA.current:
            log.info("data folder %s marked as format %d (it was %d)", settings.data_dir, formats.DATA.current, found)
