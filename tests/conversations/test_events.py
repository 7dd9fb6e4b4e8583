"""SSE framing (protocol.sse) and the streaming response (api.sse): keep-alive comments, client gone."""

from __future__ import annotations

import asyncio
import threading

import httpx
from fastapi import FastAPI

from ragengine.api.sse import sse_response
from ragengine.conversations.events import error_event, event
from ragengine.errors import UpstreamError
from ragengine.protocol.sse import DONE, frame, parse_sse
from tests.support.server import serve_app


def test_frame_and_parse_round_trip():
    text = frame(event("text_chunk", content="héllo\nworld")) + DONE
    assert text.startswith("data: {") and text.count("\n\n") == 2
    assert parse_sse(text) == [{"type": "text_chunk", "content": "héllo\nworld"}, "[DONE]"]
    err = error_event(UpstreamError("rate limited", status_code=429))
    assert err == {"type": "error", "error": {"message": "rate limited", "type": "upstream_error", "code": 429,
                                              "param": None}}


def test_keepalive_comments_while_a_step_is_slow_and_closing_stops_the_producer():
    closed = threading.Event()

    async def slow():
        yield frame(event("a"))
        await asyncio.sleep(0.35)
        yield frame(event("b"))
        yield DONE

    async def endless():
        try:
            while True:
                yield frame(event("x"))
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    app = FastAPI()
    app.get("/slow")(lambda: sse_response(slow(), keepalive_s=0.1))
    app.get("/endless")(lambda: sse_response(endless(), keepalive_s=1.0))
    with serve_app(app) as base:
        r = httpx.get(f"{base}/slow", timeout=10)
        assert r.headers["content-type"].startswith("text/event-stream") and r.headers["cache-control"] == "no-cache"
        lines = [line for line in r.text.split("\n") if line]
        assert lines[0] == 'data: {"type":"a"}' and lines[-2:] == ['data: {"type":"b"}', "data: [DONE]"]
        assert lines.count(": keep-alive") >= 2  # between a and b, while the step was slow
        with httpx.stream("GET", f"{base}/endless", timeout=10) as s:
            assert next(s.iter_lines()) == 'data: {"type":"x"}'
        assert closed.wait(5), "the producer kept running after the client went away"
