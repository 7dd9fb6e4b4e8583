"""What ``PostgresStore.open`` passes to the migrations (``migrations/versions``) through alembic's config."""

from __future__ import annotations

from alembic import op


def attributes() -> dict:
    """The schema (one per RAGEngine), the vector dimension and the HNSW parameters of this run."""
    config = op.get_context().config
    assert config is not None, "run through PostgresStore.open(), which passes the schema and dimension"
    return config.attributes
