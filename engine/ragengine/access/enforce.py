"""Where access is enforced: authentication in one middleware, authorization in one app-wide dependency.

- ``AuthenticationMiddleware`` (outside routing) turns the ``Authorization`` header into a principal for
  every path but the open ones (probes, metrics), ``/openapi.json`` and ``/docs`` included, and answers 401
  itself. The principal rides on ``request.state.principal``.
- ``authorize`` runs before every route's handler (``FastAPI(dependencies=[...])``), looks up the route's
  rule in ``access.routes.ROUTES``, finds the index the request names and applies ``access.decide``. It
  runs before body validation, so a caller who may not see an index learns nothing from a 422 either.
- Handlers that list indexes call ``visible_to(request, name)``; stores that own sessions and files take
  ``principal_of(request)``.

Every denial is one structured log line (principal, method, route, index, reason) on the
``ragengine.access`` logger, and every decision is counted by principal and outcome.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request

from ragengine.access.decide import Decision, decide, visible
from ragengine.access.routes import OPEN_PATHS, IndexFrom, rule_for
from ragengine.access.rules import Principal
from ragengine.access.source import AccessSource
from ragengine.errors import EngineError, Forbidden, NotFound, error_body_for
from ragengine.metrics import ACCESS_DECISIONS
from ragengine.protocol.openai import requested_index
from ragengine.protocol.responses import vector_store_ids

log = logging.getLogger("ragengine.access")
AUTH_MESSAGE = "Missing or invalid API key: send 'Authorization: Bearer <key>'."


def audit(decision: Decision, principal: Principal | None, method: str, route: str, index: str | None) -> None:
    label = principal.name if principal is not None else "unauthenticated"
    ACCESS_DECISIONS.labels(label, decision.reason).inc()
    if not decision.allowed:
        log.warning(json.dumps({"event": "access_denied", "principal": principal.id if principal else None,
                                "method": method, "route": route, "index": index, "reason": decision.reason,
                                "status": decision.status}))


class AuthenticationMiddleware:
    def __init__(self, app: Any, source: AccessSource) -> None:
        self.app = app
        self.source = source

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
        principal = await self.source.authenticate(header or None)
        if principal is not None:
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, send)
            return
        audit(Decision(False, 401, "unauthenticated"), None, scope["method"], scope["path"], None)
        payload = json.dumps(error_body_for(scope["path"], 401, AUTH_MESSAGE, "authentication_error")).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]})
        await send({"type": "http.response.body", "body": payload})


def principal_of(request: Request) -> Principal:
    return request.state.principal


def visible_to(request: Request, index: str) -> bool:
    return visible(principal_of(request), index, request.app.state.reserved_indexes)


async def _json_field(request: Request, name: str) -> Any:
    try:
        data = await request.json()  # cached on the request: the handler parses the very same object
    except ValueError:
        return None  # malformed: the handler answers 400/422 and touches no index
    return data.get(name) if isinstance(data, dict) else None


async def index_named(request: Request, how: IndexFrom) -> str | None:
    """The index a request names, read exactly as its handler will read it."""
    if how is IndexFrom.path:
        return request.path_params.get("index_name")
    if how is IndexFrom.body:
        value = await _json_field(request, "index_name")
        return value if isinstance(value, str) else None
    if how is IndexFrom.chat:
        index, model = await _json_field(request, "index_name"), await _json_field(request, "model")
        return requested_index(index if isinstance(index, str) else None, model if isinstance(model, str) else None)
    return None


async def indexes_named(request: Request, how: IndexFrom) -> list[str | None]:
    """Every index a request names: one (or None) for most routes; the vector stores of the ``file_search``
    tools of a response request, read as ``protocol.responses.vector_store_ids`` reads them for the handler."""
    if how is IndexFrom.tools:
        return list(vector_store_ids(await _json_field(request, "tools"))) or [None]
    if how is IndexFrom.store:
        return [request.path_params.get("vector_store_id")]
    return [await index_named(request, how)]


async def authorize(request: Request) -> None:
    route = request.scope["route"].path
    rule = rule_for("GET" if request.method == "HEAD" else request.method, route)
    if rule.open:
        return
    principal = principal_of(request)
    for index in await indexes_named(request, rule.index):  # the first denial decides
        decision = decide(principal, rule, index, reserved=request.app.state.reserved_indexes)
        if not decision.allowed:
            break
    audit(decision, principal, request.method, route, index)
    if decision.allowed:
        return
    error: EngineError = NotFound(decision.message, param=decision.param) if decision.status == 404 \
        else Forbidden(decision.message)
    raise error
