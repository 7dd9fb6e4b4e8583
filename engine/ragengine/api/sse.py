"""The one streaming response of the engine: sse-starlette's ``EventSourceResponse`` over framed events.

sse-starlette sends the keep-alive comments (``ping``) and stops the generator when the client goes
away, so no route needs its own producer task or queue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

from ragengine.protocol.sse import HEADERS, KEEPALIVE_COMMENT


async def _encoded(frames: AsyncIterator[str]) -> AsyncIterator[bytes]:
    async for text in frames:  # already framed (protocol.sse.frame): sent as is
        yield text.encode()


def sse_response(frames: AsyncIterator[str], *, keepalive_s: float = 0, headers: dict[str, str] | None = None
                 ) -> EventSourceResponse:
    """Stream ``frames``; with ``keepalive_s`` > 0 a ``: keep-alive`` comment goes out every that many seconds."""
    return EventSourceResponse(
        _encoded(frames), headers={**HEADERS, **(headers or {})}, ping=keepalive_s, sep="\n",
        ping_message_factory=lambda: ServerSentEvent(comment=KEEPALIVE_COMMENT, sep="\n"),
    )
