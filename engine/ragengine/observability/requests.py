"""Per request: its id (``x-request-id``), the app's tracing for its stages, and its one access log line.

The id is the caller's ``x-request-id`` when it is a plausible id (1 to 128 visible ASCII characters),
else a new one (32 hex digits); every response carries it, errors and streams included, and so does the
request's server span (``ragengine.request_id``) and each log line written while it is served
(observability/logs.py). The access line (logger ``ragengine.requests``) is written when the response has
been sent, streams included: method, route template, path, status, duration. The probes and the metrics
scrape (/health, /ready, /metrics) are logged at DEBUG, so a pod's log is not mostly probes.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from ragengine.metrics import route_template
from ragengine.observability import tracing
from ragengine.observability.logs import REQUEST_ID

HEADER = "x-request-id"
_VALID = re.compile(r"^[\x21-\x7e]{1,128}$")
QUIET_ROUTES = frozenset({"/health", "/ready", "/metrics"})
EXCLUDED = ",".join(f"//[^/]*{route}$" for route in sorted(QUIET_ROUTES))  # no traces either (URL regexes)
access_log = logging.getLogger("ragengine.requests")


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The caller's id when it is usable, else a new one."""
    for name, value in headers:
        if name == b"x-request-id":
            text = value.decode("latin-1").strip()
            if _VALID.match(text):
                return text
            break
    return uuid.uuid4().hex


class RequestContextMiddleware:
    """Outermost of the engine's own middlewares (inside OpenTelemetry's server span, when tracing is on)."""

    def __init__(self, app: Callable, tracing: tracing.Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope.get("headers") or [])
        rid_token = REQUEST_ID.set(rid)
        tracing_token = tracing.activate(self.tracing)
        tracing.annotate(request_id=rid)
        start = time.perf_counter()
        status = 500

        async def _send(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (HEADER.encode(), rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            route = route_template(scope)
            level = logging.DEBUG if route in QUIET_ROUTES else logging.INFO
            if access_log.isEnabledFor(level):
                duration = round((time.perf_counter() - start) * 1000, 2)
                method, path = scope.get("method", ""), scope.get("path", "")
                access_log.log(level, "%s %s %s %.2f ms", method, path, status, duration, extra={
                    "method": method, "route": route, "path": path, "status": status, "duration_ms": duration})
            tracing.deactivate(tracing_token)
            REQUEST_ID.reset(rid_token)


def install(app: Any, tracing_: tracing.Tracing) -> None:
    """Request ids and the access log on ``app``, and, when ``tracing_`` is on, OpenTelemetry's server span
    per request (an incoming ``traceparent`` continued). Call after the other middlewares: this one is
    added last, so it is the outermost of them."""
    app.add_middleware(RequestContextMiddleware, tracing=tracing_)
    if tracing_.enabled:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        # No spans for each ASGI send/receive event: a stream would get one per chunk.
        FastAPIInstrumentor.instrument_app(app, tracer_provider=tracing_.provider, excluded_urls=EXCLUDED,
                                           exclude_spans=["receive", "send"])
