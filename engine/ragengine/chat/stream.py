"""Server-sent events for chat completions: relays of chunks (framing in ``protocol.sse``).

The wire is OpenAI's: ``data: <chat.completion.chunk JSON>\\n\\n`` ... ``data: [DONE]\\n\\n``. A failure
after the 200 went out becomes one error event (OpenAI's error shape) followed by ``[DONE]``, since the
status line can no longer change (vLLM does the same).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ragengine.protocol.sse import DONE, error_object, frame

log = logging.getLogger(__name__)


def error_event(exc: BaseException) -> str:
    return frame({"error": error_object(exc)})


def chunk(completion_id: str, model: str, created: int, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": choices, **extra}


async def relay(
    upstream: AsyncIterator[dict[str, Any]],
    *,
    completion_id: str | None,
    final: Callable[[], dict[str, Any] | None] | None = None,
    on_first: Callable[[], None] | None = None,
    on_close: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[str]:
    """Forward upstream chunks as they arrive (ids rewritten to ``completion_id`` unless None), then the
    ``final`` chunk (source nodes), then ``[DONE]``. Cancellation (client gone) propagates to upstream
    through ``on_close``, which closes the upstream response."""
    first = True
    last_id = completion_id
    try:
        async for item in upstream:
            if completion_id is not None:
                item["id"] = completion_id
            else:
                last_id = item.get("id", last_id)
            if first:
                first = False
                if on_first:
                    on_first()
            yield frame(item)
        last = final() if final else None
        if last is not None:
            if not last.get("id") and last_id:
                last["id"] = last_id  # pass-through: the upstream's id
            yield frame(last)
    except Exception as exc:
        log.warning("chat stream failed after start: %s", exc)
        yield error_event(exc)
    finally:
        if on_close is not None:
            await on_close()
    yield DONE


def text_pieces(text: str, words_per_piece: int = 3) -> list[str]:
    """Split an extractive answer into small deltas, keeping whitespace so pieces join back exactly."""
    tokens = text.split(" ")
    pieces = [" ".join(tokens[i : i + words_per_piece]) for i in range(0, len(tokens), words_per_piece)]
    return [p if i == 0 else " " + p for i, p in enumerate(pieces)]


async def extractive_stream(
    text: str, *, completion_id: str, model: str, n: int, final: dict[str, Any], on_first: Callable[[], None] | None = None
) -> AsyncIterator[str]:
    created = int(time.time())
    if on_first:
        on_first()
    for i in range(n):
        start = {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        yield frame(chunk(completion_id, model, created, [start]))
        for piece in text_pieces(text):
            yield frame(chunk(completion_id, model, created, [{"index": i, "delta": {"content": piece}, "finish_reason": None}]))
        yield frame(chunk(completion_id, model, created, [{"index": i, "delta": {}, "finish_reason": "stop"}]))
    yield frame(final)
    yield DONE
