"""Progress events of a session message (seed chat-sessions-streaming.md); framing in ``protocol.sse``.

Event order: ``message_start``, [``reformulated``], ``rag_start``, [``tool_call``...], ``context_found``,
``generation_start``, ``text_chunk``..., ``message_complete`` (with sources, groundedness and the
endpoint that answered), then ``data: [DONE]``. A failure after the 200 went out is one ``error`` event
and then ``[DONE]`` (the vLLM convention). Each event is one ``data:`` line of JSON with a ``type``
field; keep-alive comments are sent by the route while a step is slow.
"""

from __future__ import annotations

from typing import Any

from ragengine.protocol.sse import error_object

EVENT_TYPES = ("message_start", "reformulated", "rag_start", "tool_call", "context_found", "generation_start",
               "text_chunk", "message_complete", "error")


def event(type_: str, **data: Any) -> dict:
    return {"type": type_, **data}


def error_event(exc: BaseException) -> dict:
    return event("error", error=error_object(exc))
