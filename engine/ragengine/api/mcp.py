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
- ``startup`` builds the session manager and runs it for the app's lifetime (a mounted app's own lifespan
  never runs: the engine's lifespan stack holds it).
"""

from __future__ import annotations

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
    return _Handoff(request.app.state.mcp, principal_of(request))


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
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from ragengine.mcp.server import build_server

    manager = StreamableHTTPSessionManager(app=build_server(), security_settings=transport_security(settings),
                                           session_idle_timeout=settings.mcp_session_idle_s,
                                           max_sessions=settings.mcp_max_sessions)
    await stack.enter_async_context(manager.run())
    app.state.mcp = manager
