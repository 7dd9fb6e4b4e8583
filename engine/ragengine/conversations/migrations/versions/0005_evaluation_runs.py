"""Evaluation runs (``ragengine.evaluation``): one row per run of an index version on a golden set; and the
golden sets source syncs hand to the engine (one per index).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "eval_runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("index_name", sa.String(256), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(400), nullable=True),
        sa.Column("acl", sa.JSON(), nullable=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("questions", sa.JSON(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.Column("results", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("runner", sa.String(64), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_eval_runs_index_created", "eval_runs", ["index_name", "created_at"])
    op.create_index("ix_eval_runs_status", "eval_runs", ["status"])
    op.create_index("ix_eval_runs_owner", "eval_runs", ["owner"])
    op.create_index("ix_eval_runs_fingerprint", "eval_runs", ["fingerprint"])
    op.create_table(
        "eval_golden_sets",
        sa.Column("index_name", sa.String(256), primary_key=True),
        sa.Column("source", sa.String(256), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("revision", sa.String(256), nullable=True),
        sa.Column("questions", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("eval_golden_sets")
    op.drop_table("eval_runs")
