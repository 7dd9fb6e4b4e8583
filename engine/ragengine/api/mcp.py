"""``/mcp``: the Model Context Protocol's streamable HTTP transport (the official SDK's session manager) as
one route of the engine's app (docs/mcp.md).

Contract:

- A FastAPI route (``GET``, ``POST``, ``DELETE``), so it runs behind everything every route runs behind:
  the authentication middleware (401 without credentials), the body limit, request ids, metrics, the access
  log, the server span and ``authorize`` (its rule in ``access/routes.py``); then it hands the raw request
  (scope, receive, send) to the SDK, which answers it, streams included. It is left out of the OpenAPI
  document: its messages are JSON-RPC, not a REST resource.
- Both protocol eras are served: 2026-07-28 requests are self-contained (no session); earlier revisions
  open a session (``Mcp-Session-Id``) with its SSE stream. A session belongs to the principal that opened it:
  the SDK compares each request's identity (``scope["user"]``, set here from the principal) with the
  opener's and answers another's request 404, as for an unknown session. Sessions are bounded
  (``mcp_max_sessions``: 503 beyond) and close after ``mcp_session_idle_s`` without a request in flight.
- The SDK is imported, and its session manager built and started, on the first ``/mcp`` request (``Sessions``):
  its import is a second or two on two busy cores and about 30 MiB, which an engine no agent talks to does not
  spend (issue 45). The import runs in a worker thread, so the event loop goes on serving meanwhile; requests
  that arrive during it wait for it. The manager then runs, in a task of its own, until the app stops (a mounted
  app's own lifespan never runs: the engine's lifespan stack stops it).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
from contextlib import AsyncExitStack
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from starlette.types import Receive, Scope, Send

from ragengine.access.enforce import MCP_PATH, principal_of
from ragengine.access.rules import Principal
from ragengine.observability.logs import REQUEST_ID
from ragengine.settings import EngineSettings

router = APIRouter(tags=["mcp"])
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _Handoff(Response):
    """A response that lets the SDK's transport answer the request itself (its status, its stream)."""

    def __init__(self, manager: Any, principal: Principal) -> None:
        super().__init__()
        self.manager = manager
        self.principal = principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken
        from opentelemetry import context

        # The session's owner: the principal (stable across a ServiceAccount's token rotation), never the token.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=self.principal.id, scopes=[]))
        state = scope.setdefault("state", {})
        state["otel_context"] = context.get_current()  # the handlers' spans join this request's trace
        state["request_id"] = REQUEST_ID.get()
        await self.manager.handle_request(scope, receive, send)


@router.api_route(MCP_PATH, methods=["GET", "POST", "DELETE"], include_in_schema=False)
async def mcp(request: Request) -> Response:
    return _Handoff(await request.app.state.mcp.manager(), principal_of(request))


class Sessions:
    """The SDK's session manager, made and started on first use, stopped by ``close``."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self._manager: Any = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def started(self) -> bool:
        return self._manager is not None

    async def manager(self) -> Any:
        if self._manager is None:
            async with self._lock:
                if self._manager is None:
                    self._manager = await self._start()
        return self._manager

    async def _start(self) -> Any:
        if self._stop.is_set():
            raise RuntimeError("the engine is stopping")
        await asyncio.to_thread(importlib.import_module, "ragengine.mcp.server")  # the SDK with it
        if self._stop.is_set():
            raise RuntimeError("the engine is stopping")
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from ragengine.mcp.server import build_server

        manager = StreamableHTTPSessionManager(app=build_server(), security_settings=transport_security(self.settings),
                                               session_idle_timeout=self.settings.mcp_session_idle_s,
                                               max_sessions=self.settings.mcp_max_sessions)
        running: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Its own task, in a context of its own (not the first request's ids and trace): the SDK's task group is
        # entered and left by the same task, as anyio requires.
        self._task = asyncio.create_task(self._run(manager, running), name="mcp-sessions", context=contextvars.Context())
        await running
        return manager

    async def _run(self, manager: Any, running: asyncio.Future[None]) -> None:
        try:
            async with manager.run():
                running.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not running.done():
                running.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            raise

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task


def transport_security(settings: EngineSettings) -> Any:
    """On a loopback address (a laptop, maybe with access control off), the SDK's DNS-rebinding protection:
    only requests addressed to localhost. Elsewhere (the pod listens on every address and is reached by its
    Service's names) none: every request carries credentials a browser page cannot add."""
    from mcp.server.transport_security import TransportSecuritySettings

    if settings.host not in LOOPBACK:
        return None
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                                     allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])


async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    if not settings.mcp_enabled:
        return
    sessions = Sessions(settings)
    stack.push_async_callback(sessions.close)
    app.state.mcp = sessions
