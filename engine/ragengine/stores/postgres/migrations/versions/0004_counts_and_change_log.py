"""Counts kept in each index's row, and the change log the replicas' keyword indexes catch up from.

Revision ID: 0004
Revises: 0003

- ``indexes`` gets ``doc_count`` and ``chunk_count`` (filled from the tables here, then kept by each write),
  ``change_seq`` (writes committed) and ``pruned_through`` (the removal log's start);
- every chunks table gets ``added_in`` (0 for the chunks written before: a replica loads them in full) and an
  index on (index_name, added_in);
- ``chunk_removals`` is created.

A database made from scratch has all of it from 0001 (which builds the current schema module): each step
only adds what is missing.
"""

from __future__ import annotations

import logging

from alembic import op
from sqlalchemy import text

from ragengine.stores.postgres.migration_context import attributes
from ragengine.stores.postgres.schema import tables

revision = "0004"
down_revision = "0003"
log = logging.getLogger(__name__)


def upgrade() -> None:
    attrs = attributes()
    schema = attrs["schema"]
    bind = op.get_bind()
    q = bind.dialect.identifier_preparer
    s = q.quote_schema(schema)
    for column in ("doc_count", "chunk_count", "change_seq", "pruned_through"):
        bind.execute(text(f"ALTER TABLE {s}.indexes ADD COLUMN IF NOT EXISTS {column} BIGINT NOT NULL DEFAULT 0"))
    tables(schema, attrs["dim"]).removals.create(bind, checkfirst=True)
    parents = bind.execute(text(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = :schema AND c.relkind = 'p' AND c.relname ~ '^chunks(_d[0-9]+)?$'"),
        {"schema": schema}).scalars().all()
    bind.execute(text(f"UPDATE {s}.indexes i SET doc_count = (SELECT count(*) FROM {s}.documents d "
                      "WHERE d.index_name = i.name)"))
    for parent in parents:
        table = f"{s}.{q.quote(parent)}"
        bind.execute(text(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS added_in BIGINT NOT NULL DEFAULT 0"))
        bind.execute(text(f"CREATE INDEX IF NOT EXISTS {q.quote(parent + '_added')} ON {table} (index_name, added_in)"))
        bind.execute(text(f"UPDATE {s}.indexes i SET chunk_count = n.count FROM (SELECT index_name, count(*) "
                          f"FROM {table} GROUP BY index_name) n WHERE n.index_name = i.name"))
    log.info("index counts and change log added to schema %s (%d chunks tables)", schema, len(parents))


def downgrade() -> None:
    raise NotImplementedError("restore a backup made before 0004 to go back")
