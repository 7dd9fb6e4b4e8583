"""Stopping without dropping a request: SIGTERM first drains, then uvicorn shuts down.

Kubernetes sends SIGTERM once the preStop sleep is over and kube-proxy has taken the pod out of the
Service. Connections a client already holds (HTTP keep-alive) still lead to this pod, though, and
uvicorn's shutdown closes the idle ones at once: a client that sends its next request in that instant
reads a closed socket (httpx's RemoteProtocolError; one of 1443 requests on the real node during a
rolling update). So on SIGTERM the engine first drains for ``shutdown_drain_seconds``: it goes on
serving, answers every request with ``Connection: close`` (the client's next request opens a new
connection, which the Service sends to a pod that stays) and ``/ready`` with 503; then uvicorn's
graceful shutdown runs. A drain as long as uvicorn's keep-alive timeout (5 s) leaves no connection
open that was never told to close: each one either got a ``Connection: close`` answer or idled out.

SIGINT (Ctrl-C) and a second SIGTERM stop at once, as before. ``shutdown_drain_seconds: 0`` (the
engine's default outside Kubernetes) turns the drain off.
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Drain:
    """Whether the process is draining; ``app.state.drain`` (the ``/ready`` route and the middleware read it)."""

    def __init__(self) -> None:
        self.since: float | None = None  # time.monotonic() of the SIGTERM

    @property
    def active(self) -> bool:
        return self.since is not None

    def start(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def over(self, seconds: float, now: float) -> bool:
        return self.since is not None and now - self.since >= seconds


class CloseWhileDraining:
    """ASGI middleware: while draining, every HTTP answer carries ``Connection: close`` (uvicorn then
    closes the connection after it, instead of keeping it for the client's next request)."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app, self.drain = app, drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self.drain.active:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_closing)


class DrainingServer(uvicorn.Server):
    """uvicorn's server with a drain between the first SIGTERM and its shutdown."""

    def __init__(self, config: uvicorn.Config, drain: Drain, drain_seconds: float) -> None:
        super().__init__(config)
        self.drain, self.drain_seconds = drain, drain_seconds

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self.drain_seconds > 0 and not self.drain.active:
            self.drain.start(time.monotonic())  # on_tick ends the drain: the signal handler only marks it
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self.drain.over(self.drain_seconds, time.monotonic()):
            self.should_exit = True
        return await super().on_tick(counter)


def install(app: Any) -> Drain:
    """Add the middleware to ``app`` (outermost: every answer, errors included) and return its ``Drain``."""
    drain = Drain()
    app.state.drain = drain
    app.add_middleware(CloseWhileDraining, drain=drain)
    return drain
