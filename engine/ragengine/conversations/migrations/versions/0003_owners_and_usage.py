"""Access control: the principal that owns each session and upload (``owner``; NULL for rows made before,
which only admins see), and the per-minute usage counts behind rate limits (``access_usage``).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    for table in ("conv_sessions", "conv_files"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("owner", sa.String(400), nullable=True))
            batch.create_index(f"ix_{table}_owner", ["owner"])
    op.create_table(
        "access_usage",
        sa.Column("principal", sa.String(400), primary_key=True),
        sa.Column("minute", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("access_usage")
    for table in ("conv_files", "conv_sessions"):
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_owner")
            batch.drop_column("owner")
