"""SSE framing and keep-alive comments."""

from __future__ import annotations

import asyncio

import pytest

from ragengine.conversations.events import DONE, KEEPALIVE, event, frame, parse_sse, with_keepalive


def test_frame_and_parse_round_trip():
    text = frame(event("text_chunk", content="héllo\nworld")) + DONE
    assert text.startswith("data: {") and text.count("\n\n") == 2
    assert parse_sse(text) == [{"type": "text_chunk", "content": "héllo\nworld"}, "[DONE]"]


async def test_keepalive_comments_while_a_step_is_slow():
    async def slow():
        yield "a"
        await asyncio.sleep(0.35)
        yield "b"

    out = [x async for x in with_keepalive(slow(), 0.1)]
    assert out[0] == "a" and out[-1] == "b" and out.count(KEEPALIVE) >= 2


async def test_errors_propagate_and_closing_cancels_the_producer():
    async def failing():
        yield "a"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        async for _ in with_keepalive(failing(), 1.0):
            pass

    cancelled = asyncio.Event()

    async def endless():
        try:
            while True:
                yield "x"
                await asyncio.sleep(0.01)
        finally:
            cancelled.set()

    gen = with_keepalive(endless(), 1.0)
    assert await anext(gen) == "x"
    await gen.aclose()
    await asyncio.wait_for(cancelled.wait(), 2)
