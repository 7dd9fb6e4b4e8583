"""Alembic environment for the session store (SQLite or PostgreSQL). Run by ``schema.upgrade`` at start-up,
which passes the connection in ``config.attributes``; never by hand."""

from __future__ import annotations

from alembic import context

from ragengine.conversations.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
