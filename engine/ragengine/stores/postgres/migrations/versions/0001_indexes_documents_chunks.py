"""Indexes, documents and chunks with pgvector HNSW and a full-text column.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Index

from ragengine.stores.postgres.migration_context import attributes
from ragengine.stores.postgres.schema import chunk_indexes, tables

revision = "0001"
down_revision = None


def upgrade() -> None:
    attrs = attributes()
    schema, dim = attrs["schema"], attrs["dim"]
    t = tables(schema, dim)
    bind = op.get_bind()
    t.indexes.create(bind)
    t.documents.create(bind)
    t.chunks.create(bind)
    Index("documents_pos", t.documents.c.index_name, t.documents.c.pos).create(bind)
    for index in chunk_indexes(t.chunks):
        index.create(bind)


def downgrade() -> None:
    attrs = attributes()
    t = tables(attrs["schema"], attrs["dim"])
    bind = op.get_bind()
    t.chunks.drop(bind)
    t.documents.drop(bind)
    t.indexes.drop(bind)
