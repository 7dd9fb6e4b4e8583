"""SSE progress events for session messages: framing, and keep-alive comments while a step is slow.

Event order (seed chat-sessions-streaming.md): ``message_start``, [``reformulated``], ``rag_start``,
[``tool_call``...], ``context_found``, ``generation_start``, ``text_chunk``..., ``message_complete``
(with sources, groundedness and the endpoint that answered), then ``data: [DONE]``. A failure after
the 200 went out is one ``error`` event and then ``[DONE]`` (the vLLM convention). Each event is one
``data:`` line of JSON with a ``type`` field; ``: keep-alive`` comment lines are sent when nothing
else was for ``interval`` seconds (proxies drop idle connections; SSE clients ignore comments).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

DONE = "data: [DONE]\n\n"
KEEPALIVE = ": keep-alive\n\n"
EVENT_TYPES = ("message_start", "reformulated", "rag_start", "tool_call", "context_found", "generation_start",
               "text_chunk", "message_complete", "error")


def event(type_: str, **data: Any) -> dict:
    return {"type": type_, **data}


def frame(evt: dict) -> str:
    return f"data: {json.dumps(evt, ensure_ascii=False, default=str)}\n\n"


def error_event(message: str, *, status: int = 500, error_type: str = "internal_error") -> dict:
    return event("error", error={"message": message, "type": error_type, "code": status})


async def with_keepalive(events: AsyncIterator[str], interval: float) -> AsyncIterator[str]:
    """Yield ``events``; while the next one takes longer than ``interval`` s, yield keep-alive comments.

    The producer runs as a task feeding a queue, so waiting never cancels it mid-step; closing this
    generator (client went away) cancels the producer.
    """
    queue: asyncio.Queue = asyncio.Queue(maxsize=64)
    end = object()

    async def produce() -> None:
        try:
            async for item in events:
                await queue.put(item)
        except Exception as exc:  # delivered to the consumer, which re-raises
            await queue.put(exc)
            return
        await queue.put(end)

    task = asyncio.create_task(produce())
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=interval)
            except TimeoutError:
                yield KEEPALIVE
                continue
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def parse_sse(text: str) -> list[dict | str]:
    """Test/client helper: the ``data:`` payloads of an SSE body, JSON-decoded (``"[DONE]"`` kept)."""
    out: list[dict | str] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
