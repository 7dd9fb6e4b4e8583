"""Sessions, threads, messages, files and their attachments: the schema that ``create_all`` made before
the store had migrations (databases from then are stamped at this revision, not re-created).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "conv_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(256), nullable=True),
        sa.Column("title", sa.String(512), nullable=True),
        sa.Column("index_name", sa.String(256), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_conv_sessions_user_id", "conv_sessions", ["user_id"])
    op.create_index("ix_conv_sessions_updated_at", "conv_sessions", ["updated_at"])
    op.create_table(
        "conv_threads",
        sa.Column("session_id", sa.String(64), sa.ForeignKey("conv_sessions.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("parent_thread_id", sa.String(64), nullable=True),
        sa.Column("parent_message_id", sa.String(64), nullable=True),
        sa.Column("title", sa.String(512), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "conv_messages",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("session_id", sa.String(64), sa.ForeignKey("conv_sessions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_conv_messages_thread", "conv_messages", ["session_id", "thread_id", "seq"])
    op.create_table(
        "conv_files",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("filename", sa.String(1024), nullable=False),
        sa.Column("content_type", sa.String(128), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("documents", sa.Integer(), nullable=False),
        sa.Column("doc_ids", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_conv_files_status", "conv_files", ["status"])
    op.create_table(
        "conv_session_files",
        sa.Column("session_id", sa.String(64), sa.ForeignKey("conv_sessions.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("file_id", sa.String(64), sa.ForeignKey("conv_files.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("attached_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    for table in ("conv_session_files", "conv_files", "conv_messages", "conv_threads", "conv_sessions"):
        op.drop_table(table)
