"""Chunks partitioned by index: each index's rows in a table of their own, with an HNSW index of its own.

Revision ID: 0003
Revises: 0002

A database made before this revision has ordinary ``chunks`` (and ``chunks_d<dim>``) tables with one HNSW
index over every index's vectors. Each becomes a partitioned table: the old table is renamed, the new one
made from the schema module, one leaf per index, the rows copied with their ids, the old table dropped.
The leaves get their HNSW index from the store's background build (``PostgresStore.maintain``) once they
hold more than the threshold's rows, as any index does. A database made from scratch is partitioned by
0001 already (it builds the current schema module) and is left as it is.
"""

from __future__ import annotations

import logging
from typing import Any

from alembic import op
from sqlalchemy import Table, text

from ragengine.stores.postgres.migration_context import attributes
from ragengine.stores.postgres.schema import chunk_indexes, chunks_table, create_leaf, tables

revision = "0003"
down_revision = "0002"
log = logging.getLogger(__name__)
COLUMNS = "id, index_name, doc_id, seq, text, search_text, metadata, embedding"


def upgrade() -> None:
    attrs = attributes()
    schema = attrs["schema"]
    bind = op.get_bind()
    legacy = bind.execute(text(
        "SELECT c.relname, a.atttypmod FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding' "
        "WHERE n.nspname = :schema AND c.relkind = 'r' AND c.relname ~ '^chunks(_d[0-9]+)?$'"), {"schema": schema}).all()
    for name, dim in legacy:
        own = tables(schema, int(dim))  # a fresh MetaData each: "chunks" may have another dimension than ours
        _partition(bind, schema, own.chunks if name == "chunks" else chunks_table(own.metadata, name, int(dim), own.documents))


def _partition(bind: Any, schema: str, table: Table) -> None:
    name = table.name
    q = bind.dialect.identifier_preparer
    old, new_name = f"{q.quote_schema(schema)}.{q.quote(name)}", f"{name}_0002"
    count = bind.execute(text(f"SELECT count(*) FROM {old}")).scalar_one()
    log.info("partitioning %s.%s by index (%d chunks)", schema, name, count)
    bind.execute(text(f"ALTER TABLE {old} ALTER COLUMN id DROP IDENTITY IF EXISTS"))
    bind.execute(text(f"ALTER TABLE {old} RENAME TO {q.quote(new_name)}"))
    moved = f"{q.quote_schema(schema)}.{q.quote(new_name)}"
    for index in bind.execute(text("SELECT indexname FROM pg_indexes WHERE schemaname = :s AND tablename = :t"),
                              {"s": schema, "t": new_name}).scalars().all():
        bind.execute(text(f"ALTER INDEX {q.quote_schema(schema)}.{q.quote(index)} RENAME TO {q.quote(index + '_0002')}"))
    table.create(bind)
    for index in chunk_indexes(table):
        index.create(bind)
    for index_name in bind.execute(text(f"SELECT DISTINCT index_name FROM {moved}")).scalars().all():
        create_leaf(bind, table, index_name)
    bind.execute(text(f"INSERT INTO {old} ({COLUMNS}) SELECT {COLUMNS} FROM {moved}"))
    bind.execute(text(f"SELECT setval(:seq, GREATEST((SELECT max(id) FROM {old}), 1))"),
                 {"seq": f"{q.quote_schema(schema)}.{q.quote(name + '_id_seq')}"})
    bind.execute(text(f"DROP TABLE {moved}"))


def downgrade() -> None:
    raise NotImplementedError("chunks stay partitioned: restore a backup made before 0003 to go back")
