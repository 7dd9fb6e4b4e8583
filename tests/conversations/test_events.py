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
    """A step that is held until the client has seen two keep-alive comments: they arrive while it waits
    (no count of comments inside a time gap), then the step's event and [DONE]."""
    closed, release = threading.Event(), threading.Event()

    async def slow():
        yield frame(event("a"))
        while not release.is_set():  # the step: done when the test says so
            await asyncio.sleep(0.01)
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
        lines: list[str] = []
        with httpx.stream("GET", f"{base}/slow", timeout=10) as r:
            assert r.headers["content-type"].startswith("text/event-stream") and r.headers["cache-control"] == "no-cache"
            for line in r.iter_lines():
                if not line:
                    continue
                lines.append(line)
                if lines.count(": keep-alive") == 2 and not release.is_set():
                    assert lines == ['data: {"type":"a"}', ": keep-alive", ": keep-alive"]  # while the step waits
                    release.set()
        assert release.is_set(), lines
        assert lines[-2:] == ['data: {"type":"b"}', "data: [DONE]"]
        assert set(lines[3:-2]) <= {": keep-alive"}  # perhaps one more sent before the step noticed
        with httpx.stream("GET", f"{base}/endless", timeout=10) as s:
            assert next(s.iter_lines()) == 'data: {"type":"x"}'
        assert closed.wait(30), "the producer kept running after the client went away"
