"""The fake vLLM (see package docstring)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

_TOKEN = re.compile(r"\w+|[^\w\s]")
MESSAGE_OVERHEAD = 4  # role markers per message, like a chat template
GENERATION_PROMPT = 3


def tokenize(text: str) -> list[int]:
    """Deterministic whitespace-ish tokenizer: words and single punctuation marks."""
    return [zlib.crc32(t.encode()) % 50_000 for t in _TOKEN.findall(text)]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def count_message_tokens(messages: list[dict]) -> int:
    """What the 'chat template' costs: content tokens + per-message overhead + generation prompt."""
    return sum(len(tokenize(_content_text(m.get("content")))) + MESSAGE_OVERHEAD for m in messages) + GENERATION_PROMPT


def default_reply(body: dict) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    last = _content_text(users[-1].get("content")) if users else ""
    return f"Echo: {' '.join(last.split()[:12])}"


@dataclass
class FakeLLM:
    """Behaviour knobs and the request log. Safe to change from the test thread between requests."""

    model: str = "fake-llm"
    max_model_len: int = 4096
    reply: str | Callable[[dict], str] = default_reply
    first_token_delay_s: float = 0.0
    latency_per_token_s: float = 0.0
    tokenize_enabled: bool = True
    # Streams send this many content chunks, then an error event instead of the rest.
    stream_error_after: int | None = None
    # Streams send this many content chunks, then wait until ``stream_release`` is set (or the client goes):
    # a test sees what the engine forwarded while the LLM is provably still generating.
    stream_hold_after: int | None = None
    stream_release: threading.Event = field(default_factory=threading.Event, repr=False)
    max_log: int = 10_000
    # Each entry answers one chat request with (status, message) instead of a completion.
    fail_next: list[tuple[int, str]] = field(default_factory=list)
    # False: started without --enable-auto-tool-choice --tool-call-parser, so tool_choice "auto" (what
    # `tools` without a tool_choice means) gets vLLM's 400.
    auto_tool_choice: bool = True
    # Set: the reply is sent verbatim, cut into these deltas (streams) or joined back (JSON), instead of
    # re-spaced word by word; the guardrails tests split secrets across deltas with it.
    split: Callable[[str], list[str]] | None = None
    # The fields beside ``content`` a vLLM may send (issue 41: the output policy must see them all): a reasoning
    # parser's ``reasoning_content`` (streamed before the answer), one tool call ``lookup`` with these arguments
    # (streamed after it), ``logprobs`` (each piece's token and one alternative), vLLM's ``token_ids`` per
    # choice (here the pieces' code points: a byte-level tokenizer, so a test can decode what they say).
    reasoning: str | None = None
    tool_arguments: str | None = None
    logprobs: bool = False
    token_ids: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    stream_events: list[str] = field(default_factory=list)  # "completed" | "disconnected" per stream
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, path: str, body: Any, headers: dict) -> None:
        with self._lock:
            self.requests.append({"path": path, "body": body, "headers": headers, "time": time.time()})
            if len(self.requests) > self.max_log:
                del self.requests[: len(self.requests) - self.max_log]

    def chat_requests(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["path"] == "/v1/chat/completions"]

    def last_chat(self) -> dict:
        return self.chat_requests()[-1]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.stream_events.clear()
            self.fail_next.clear()


def _error(status: int, message: str) -> JSONResponse:
    kinds = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 429: "RateLimitError"}
    return JSONResponse({"error": {"message": message, "type": kinds.get(status, "InternalServerError"),
                                   "param": None, "code": status}}, status_code=status)


def create_llm_app(llm: FakeLLM | None = None) -> FastAPI:
    llm = llm or FakeLLM()
    app = FastAPI(title="fake-vllm")
    app.state.llm = llm

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        llm.record("/v1/models", None, dict(request.headers))
        return {"object": "list", "data": [{"id": llm.model, "object": "model", "created": 0, "owned_by": "vllm",
                                            "root": llm.model, "max_model_len": llm.max_model_len}]}

    @app.post("/tokenize")
    async def tokenize_route(request: Request):
        body = await request.json()
        llm.record("/tokenize", body, dict(request.headers))
        if not llm.tokenize_enabled:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        if "messages" in body:
            count = count_message_tokens(body["messages"])
            tokens = list(range(count))
        else:
            tokens = tokenize(body.get("prompt", ""))
            count = len(tokens)
        return {"count": count, "max_model_len": llm.max_model_len, "tokens": tokens}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        llm.record("/v1/chat/completions", body, dict(request.headers))
        if llm.fail_next:
            status, message = llm.fail_next.pop(0)
            return _error(status, message)
        if body.get("model") not in (None, llm.model):
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        if body.get("tools") and body.get("tool_choice", "auto") == "auto" and not llm.auto_tool_choice:
            # vLLM's words (vllm/renderers/online_renderer.py)
            return _error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        prompt_tokens = count_message_tokens(body.get("messages", []))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if prompt_tokens + (max_tokens or 0) > llm.max_model_len:
            return _error(400, f"This model's maximum context length is {llm.max_model_len} tokens. However, you "
                               f"requested {prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in the "
                               f"messages, {max_tokens or 0} in the completion).")
        text = llm.reply(body) if callable(llm.reply) else llm.reply
        pieces = llm.split(text) if llm.split else _TOKEN.findall(text)
        joiner = "" if llm.split else " "
        limit = max_tokens or (llm.max_model_len - prompt_tokens)
        finish = "length" if len(pieces) > limit else "stop"
        pieces = pieces[:limit]
        n = int(body.get("n") or 1)
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces) * n,
                 "total_tokens": prompt_tokens + len(pieces) * n}
        if not body.get("stream"):
            await asyncio.sleep(llm.first_token_delay_s + llm.latency_per_token_s * len(pieces))
            content = joiner.join(pieces)
            return {"id": cid, "object": "chat.completion", "created": created, "model": llm.model,
                    "choices": [{"index": i, "message": _message(llm, content), "finish_reason": finish,
                                 **_beside(llm, pieces)} for i in range(n)],
                    "usage": usage, **({"prompt_token_ids": [1, 2, 3]} if llm.token_ids else {})}

        def event(choices: list, **extra: Any) -> str:
            return "data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                          "model": llm.model, "choices": choices, **extra}) + "\n\n"

        async def events():
            done = False
            try:
                if llm.first_token_delay_s:
                    await asyncio.sleep(llm.first_token_delay_s)
                for i in range(n):
                    yield event([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                                **({"prompt_token_ids": [1, 2, 3]} if llm.token_ids else {}))
                    for piece in (llm.split or _TOKEN.findall)(llm.reasoning) if llm.reasoning else ():
                        yield event([{"index": i, "delta": {"reasoning_content": piece}, "finish_reason": None}])
                    for j, piece in enumerate(pieces):
                        if llm.stream_error_after is not None and j >= llm.stream_error_after:
                            yield "data: " + json.dumps({"error": {"message": "engine crashed mid-stream",
                                                                   "type": "InternalServerError", "code": 500}}) + "\n\n"
                            done = True
                            return
                        if llm.latency_per_token_s:
                            await asyncio.sleep(llm.latency_per_token_s)
                        if llm.stream_hold_after is not None and j == llm.stream_hold_after:
                            while not llm.stream_release.is_set():  # cancelled here when the client goes
                                await asyncio.sleep(0.01)
                        sent = piece if j == 0 else joiner + piece
                        yield event([{"index": i, "delta": {"content": sent}, "finish_reason": None,
                                      **_beside(llm, [sent])}])
                    if llm.tool_arguments is not None:
                        yield event([{"index": i, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                                         "function": {"name": "lookup", "arguments": ""}}]},
                                      "finish_reason": None}])
                        for part in (llm.split or _TOKEN.findall)(llm.tool_arguments):
                            yield event([{"index": i, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": part}}]},
                                          "finish_reason": None}])
                    yield event([{"index": i, "delta": {}, "finish_reason": finish}])
                if (body.get("stream_options") or {}).get("include_usage"):
                    yield event([], usage=usage)
                yield "data: [DONE]\n\n"
                done = True
            finally:
                llm.stream_events.append("completed" if done else "disconnected")

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def _message(llm: FakeLLM, content: str) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if llm.reasoning is not None:
        message["reasoning_content"] = llm.reasoning
    if llm.tool_arguments is not None:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "lookup", "arguments": llm.tool_arguments}}]
    return message


def _beside(llm: FakeLLM, pieces: list[str]) -> dict:
    """A choice's ``logprobs`` and ``token_ids`` for ``pieces`` (each piece one token), when the knobs say so."""
    out: dict[str, Any] = {"logprobs": None}
    if llm.logprobs:
        out["logprobs"] = {"content": [{"token": p, "logprob": -0.1, "bytes": list(p.encode()),
                                        "top_logprobs": [{"token": p, "logprob": -0.1, "bytes": list(p.encode())}]}
                                       for p in pieces]}
    if llm.token_ids:
        out["token_ids"] = [ord(c) for p in pieces for c in p]
    return out
