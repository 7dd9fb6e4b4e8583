"""Server-sent events as the engine writes them, for every streaming endpoint (pure string building).

One ``data: <compact JSON>`` line per event, a blank line after it, ``data: [DONE]`` last (OpenAI's
and vLLM's convention, kept by the session streams too). A failure after the 200 went out can only be
an event: ``error_object`` gives its body, OpenAI's error shape, so clients read it like any error.
"""

from __future__ import annotations

import json
from typing import Any

from ragengine.errors import EngineError

DONE = "data: [DONE]\n\n"
# no-cache: never replay a stream from a cache; X-Accel-Buffering: nginx ingress must not buffer it.
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEPALIVE_COMMENT = "keep-alive"  # sent as ": keep-alive" while a session step is slow


def frame(data: dict[str, Any]) -> str:
    """One event: ``data: {...}`` and the blank line that ends it."""
    return f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False, default=str)}\n\n"


def error_object(exc: BaseException) -> dict[str, Any]:
    """OpenAI's error object for ``exc``: the engine's own status and type, or a 500 naming the exception."""
    if isinstance(exc, EngineError):
        return {"message": exc.message, "type": exc.error_type, "code": exc.status_code, "param": exc.param}
    return {"message": f"Stream failed: {exc.__class__.__name__}: {exc}", "type": "internal_error", "code": 500,
            "param": None}


def parse_sse(text: str) -> list[dict | str]:
    """Client/test helper: the ``data:`` payloads of an SSE body, JSON-decoded (``"[DONE]"`` kept)."""
    out: list[dict | str] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
