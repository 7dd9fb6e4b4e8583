"""Index versions: the dimension of an index whose vectors differ from ``chunks``'s, and the version books.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

from ragengine.stores.postgres.migration_context import attributes
from ragengine.stores.postgres.schema import tables

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    attrs = attributes()
    schema = attrs["schema"]
    # 0001 builds its tables from the current schema module, so a database made from scratch already has
    # both: add them only where they are missing.
    bind = op.get_bind()
    quoted = bind.dialect.identifier_preparer.quote_schema(schema)
    op.execute(f"ALTER TABLE {quoted}.indexes ADD COLUMN IF NOT EXISTS dim INTEGER")
    tables(schema, attrs["dim"]).versions.create(bind, checkfirst=True)


def downgrade() -> None:
    attrs = attributes()
    tables(attrs["schema"], attrs["dim"]).versions.drop(op.get_bind())
    op.drop_column("indexes", "dim", schema=attrs["schema"])
