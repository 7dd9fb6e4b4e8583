"""PostgreSQL + pgvector: HNSW on the vectors, PostgreSQL full-text search for the keyword side, one
schema per RAGEngine, created and upgraded by alembic migrations (``migrations/``)."""
