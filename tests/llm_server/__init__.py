"""A small OpenAI-compatible LLM server that behaves like vLLM on the wire, for tests and benchmarks.

``create_llm_app(FakeLLM(...))`` gives a FastAPI app; serve it with ``tests.support.server.serve_app``
or ``python -m tests.llm_server --port 8090``. It answers ``GET /v1/models`` (with ``max_model_len``),
``POST /tokenize`` (vLLM's ``{"count", "max_model_len", "tokens"}``), ``POST /v1/chat/completions``
with and without SSE (``stream_options.include_usage``), rejects prompts that overflow its window the
way vLLM does, refuses ``tool_choice: "auto"`` with vLLM's 400 when made to (``auto_tool_choice=False``:
a vLLM started without a tool parser), and records every request so tests can assert the exact prompt, context and
``max_tokens`` the engine sent. ``write_tokenizer(path)`` saves its tokenizer as a ``tokenizer.json`` (a
local tokenizer of the served model, for the engine's ``llm_tokenizer``).
"""

from tests.llm_server.app import FakeLLM, count_message_tokens, create_llm_app, tokenize, write_tokenizer

__all__ = ["FakeLLM", "count_message_tokens", "create_llm_app", "tokenize", "write_tokenizer"]
