"""A scripted OpenAI-compatible LLM for the conversation tests: tool calls, streaming, failures.

``ScriptedLLM.script`` is a queue of assistant messages (``{"content": ...}`` or ``{"tool_calls":
[...]}``) answered in order, one per chat request; when it is empty ``reply(body)`` answers (default:
the first context passage's first sentence, so answers are grounded). ``fail_status`` makes every
chat request fail with that status (a dead endpoint in a fallback chain). Every request is recorded.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def grounded_reply(body: dict) -> str:
    """First sentence of the first context passage in the system prompt, else an echo of the question."""
    system = next((m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "system"), "")
    tools = [m for m in body.get("messages", []) if m.get("role") == "tool"]
    if tools:
        chunks = json.loads(tools[-1]["content"]).get("chunks") or []
        if chunks:
            return chunks[0]["text"].split(". ")[0].strip().rstrip(".") + "."
    if "Context:" in system:
        block = system.split("---------------------")[1].strip()
        lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("[")]
        if lines:
            return lines[0].split(". ")[0].strip().rstrip(".") + "."
    user = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return f"Echo: {user[-1]['content'] if user else ''}"


def tool_call(query: Any = None, *, top_k: Any = 3, name: str = "semantic_search", raw: str | None = None,
              **extra: Any) -> dict:
    args: dict[str, Any] = {**extra}
    if query is not None:
        args["query"] = query
    if top_k is not None:
        args["top_k"] = top_k
    return {"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
            "function": {"name": name, "arguments": raw if raw is not None else json.dumps(args)}}


@dataclass
class ScriptedLLM:
    model: str = "scripted"
    max_model_len: int = 4096
    script: list[dict] = field(default_factory=list)
    reply: Callable[[dict], str] = grounded_reply
    fail_status: int | None = None
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0  # between streamed words (a slow generation a client can walk away from)
    requests: list[dict] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def chats(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["path"] == "/v1/chat/completions"]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.script.clear()
        self.fail_status = None
        self.delay_s = 0.0
        self.chunk_delay_s = 0.0
        self.reply = grounded_reply


def create_scripted_app(llm: ScriptedLLM) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": llm.model, "object": "model", "max_model_len": llm.max_model_len}]}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict:
        body = await request.json()
        if "messages" in body:
            count = sum(count_tokens(str(m.get("content") or "")) + 4 for m in body["messages"]) + 3
        else:
            count = count_tokens(body.get("prompt", ""))
        return {"count": count, "max_model_len": llm.max_model_len, "tokens": list(range(count))}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        with llm._lock:
            llm.requests.append({"path": "/v1/chat/completions", "body": body, "time": time.time()})
            scripted = llm.script.pop(0) if llm.script else None
        if llm.fail_status:
            return JSONResponse({"error": {"message": "scripted failure", "type": "server_error",
                                           "code": llm.fail_status}}, status_code=llm.fail_status)
        if llm.delay_s:
            await asyncio.sleep(llm.delay_s)
        message = scripted or {"content": llm.reply(body)}
        message = {"role": "assistant", "content": message.get("content"), **{k: v for k, v in message.items() if k != "content"}}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        usage = {"prompt_tokens": 10, "completion_tokens": count_tokens(message.get("content") or ""), "total_tokens": 0}
        if not body.get("stream"):
            return {"id": cid, "object": "chat.completion", "created": created, "model": llm.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}

        def chunk(delta: dict, finish_reason: str | None = None) -> str:
            return "data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                          "model": llm.model, "choices": [{"index": 0, "delta": delta,
                                                                           "finish_reason": finish_reason}]}) + "\n\n"

        async def events():
            yield chunk({"role": "assistant", "content": ""})
            for i, word in enumerate((message.get("content") or "").split(" ")):
                if llm.chunk_delay_s:
                    await asyncio.sleep(llm.chunk_delay_s)
                yield chunk({"content": word if i == 0 else " " + word})
            yield chunk({}, finish)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app
