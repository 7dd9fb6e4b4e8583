"""Uploads shared by replicas: the bytes of a file waiting for ingestion (``conv_file_blobs``) and the
ingestion job's lease on ``conv_files`` (owner, expiry, attempts), so any replica can take a job and a
job held by a replica that died is taken again once its lease runs out.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("conv_files") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(128), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "conv_file_blobs",
        sa.Column("file_id", sa.String(64), sa.ForeignKey("conv_files.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("conv_file_blobs")
    with op.batch_alter_table("conv_files") as batch:
        for column in ("attempts", "lease_expires_at", "lease_owner"):
            batch.drop_column(column)
