"""OpenAI's vector stores on the engine's indexes: objects, catalog, ingestion, service (docs/openai.md)."""
