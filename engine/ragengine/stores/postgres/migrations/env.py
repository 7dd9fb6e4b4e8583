"""Alembic environment for the vector-store schema. Run by ``PostgresStore.open`` (never by hand), which
passes the connection and the settings through ``config.attributes``: the schema (one per RAGEngine),
the vector dimension and the HNSW parameters. The version table lives in that schema too, so several
RAGEngines migrate independently in one database."""

from __future__ import annotations

from alembic import context

config = context.config
schema = config.attributes["schema"]
connection = config.attributes["connection"]
context.configure(connection=connection, version_table_schema=schema, include_schemas=True)
with context.begin_transaction():
    context.run_migrations()
