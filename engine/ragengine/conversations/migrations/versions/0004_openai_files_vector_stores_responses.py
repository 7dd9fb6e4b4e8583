"""OpenAI's surface on the engine: a file's ``purpose`` and ``expires_at``; vector stores (a row per index
seen through the vector store API), the files attached to them with their ingestion, file batches; and
stored responses.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("conv_files") as batch:
        batch.add_column(sa.Column("purpose", sa.String(32), nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime(), nullable=True))
    op.create_table(
        "vs_stores",
        sa.Column("id", sa.String(256), primary_key=True),
        sa.Column("name", sa.String(512), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("expires_after_days", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_active_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "vs_files",
        sa.Column("store_id", sa.String(256), primary_key=True),
        sa.Column("file_id", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error_code", sa.String(32), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("usage_bytes", sa.Integer(), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("chunking", sa.JSON(), nullable=False),
        sa.Column("doc_ids", sa.JSON(), nullable=False),
        sa.Column("batch_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
    )
    op.create_index("ix_vs_files_file_id", "vs_files", ["file_id"])
    op.create_index("ix_vs_files_status", "vs_files", ["status"])
    op.create_index("ix_vs_files_batch_id", "vs_files", ["batch_id"])
    op.create_table(
        "vs_file_batches",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("store_id", sa.String(256), nullable=False),
        sa.Column("file_ids", sa.JSON(), nullable=False),
        sa.Column("cancelled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_vs_file_batches_store_id", "vs_file_batches", ["store_id"])
    op.create_table(
        "resp_responses",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(400), nullable=True),
        sa.Column("previous_response_id", sa.String(64), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("input_items", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_resp_responses_owner", "resp_responses", ["owner"])


def downgrade() -> None:
    for table in ("resp_responses", "vs_file_batches", "vs_files", "vs_stores"):
        op.drop_table(table)
    with op.batch_alter_table("conv_files") as batch:
        for column in ("expires_at", "purpose"):
            batch.drop_column(column)
