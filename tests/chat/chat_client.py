"""Speaking to the chat endpoint in the HTTP tests: the request, its SSE events and its OpenAI-shaped errors."""

from __future__ import annotations

import json

import httpx

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def post(base: str, body, **kw) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30, **kw)


def sse_events(response: httpx.Response) -> list:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def error_of(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["message"]

