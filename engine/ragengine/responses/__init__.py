"""OpenAI's Responses API with file_search: plan, citations, events, store, service (docs/openai.md)."""
