"""Where access is enforced: authentication in one middleware, authorization in one app-wide dependency.

- ``AuthenticationMiddleware`` (outside routing) turns the ``Authorization`` header into a principal for
  every path but the open ones (probes, metrics, the console's files), ``/openapi.json`` and ``/docs`` included, and
  answers 401 itself (503 when a ServiceAccount token cannot be reviewed right now, 429 when the caller's address
  sent more unknown tokens than the review budget allows: access/serviceaccounts.py). The principal rides on
  ``request.state.principal``.
- ``authorize`` runs before every route's handler (``FastAPI(dependencies=[...])``), looks up the route's
  rule in ``access.routes.ROUTES``, finds the index the request names and applies ``access.decide``. It
  runs before body validation, so a caller who may not see an index learns nothing from a 422 either.
  On ``owned`` routes it also checks that the session or upload the path names is the caller's (and that
  the session's index is one they see): 404 otherwise, as for a missing one. Then the caller's rate
  limits (429 with ``Retry-After``), and the LLM tokens the request spends are billed to them
  (``access.usage``).
- Handlers that list indexes call ``visible_to(request, name)``; lists of sessions and uploads use
  ``owner_filter``; retrieval takes ``document_acl(principal_of(request))``.

Every denial is one structured log line (principal, method, route, index, reason) on the
``ragengine.access`` logger, and every decision is counted by principal, kind and outcome.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request

from ragengine.access import usage
from ragengine.access.decide import ALLOW, Decision, decide, owns, session_visible, visible
from ragengine.access.limits import retry_after
from ragengine.access.routes import MCP_CALLS, IndexFrom, Rule, is_open, rule_for
from ragengine.access.rules import Principal, Role
from ragengine.access.serviceaccounts import ReviewThrottled, ReviewUnavailable
from ragengine.access.source import AccessSource
from ragengine.errors import EngineError, Forbidden, NotFound, RateLimited, error_body_for
from ragengine.metrics import ACCESS_DECISIONS
from ragengine.protocol.openai import requested_index
from ragengine.protocol.responses import vector_store_ids

log = logging.getLogger("ragengine.access")
AUTH_MESSAGE = "Missing or invalid credentials: send 'Authorization: Bearer <key or ServiceAccount token>'."
MCP_PATH = "/mcp"
REVIEW_MESSAGE = "ServiceAccount tokens cannot be verified right now (the Kubernetes API did not answer); retry."


def audit(decision: Decision, principal: Principal | None, method: str, route: str, index: str | None) -> None:
    label, kind = (principal.name, principal.kind) if principal is not None else ("unauthenticated", "none")
    ACCESS_DECISIONS.labels(label, kind, decision.reason).inc()
    if not decision.allowed:
        log.warning(json.dumps({"event": "access_denied", "principal": principal.id if principal else None,
                                "method": method, "route": route, "index": index, "reason": decision.reason,
                                "status": decision.status}))


async def _answer(send: Any, path: str, status: int, message: str, error_type: str, extra: list) -> None:
    payload = json.dumps(error_body_for(path, status, message, error_type)).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra,
    ]})
    await send({"type": "http.response.body", "body": payload})


class AuthenticationMiddleware:
    def __init__(self, app: Any, source: AccessSource) -> None:
        self.app = app
        self.source = source

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
        client = (scope.get("client") or (None,))[0]
        try:
            principal = await self.source.authenticate(header or None, client)
        except ReviewUnavailable as exc:
            log.error("cannot verify a ServiceAccount token: %s", exc)
            audit(Decision(False, 503, "review_unavailable"), None, scope["method"], scope["path"], None)
            await _answer(send, scope["path"], 503, REVIEW_MESSAGE, "service_unavailable", [(b"retry-after", b"5")])
            return
        except ReviewThrottled as exc:
            audit(Decision(False, 429, "review_throttled"), None, scope["method"], scope["path"], None)
            await _answer(send, scope["path"], 429, f"{exc}; retry later.", "rate_limit_exceeded",
                          [(b"retry-after", retry_after(exc.wait_s).encode())])
            return
        if principal is not None:
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, send)
            return
        audit(Decision(False, 401, "unauthenticated"), None, scope["method"], scope["path"], None)
        await _answer(send, scope["path"], 401, AUTH_MESSAGE, "authentication_error",
                      [(b"www-authenticate", challenge(scope["path"], bool(header)))])


def challenge(path: str, sent: bool) -> bytes:
    """The ``WWW-Authenticate`` of a 401. ``/mcp`` answers as RFC 6750 says (and MCP clients parse): a realm,
    and ``error="invalid_token"`` when a credential was sent. It names no ``resource_metadata``: the engine
    takes API keys and ServiceAccount tokens and runs no OAuth authorization server for a client to discover
    (docs/mcp.md). Every other route keeps its plain ``Bearer``."""
    if path != MCP_PATH:
        return b"Bearer"
    if not sent:
        return b'Bearer realm="ragengine"'
    return b'Bearer realm="ragengine", error="invalid_token", error_description="unknown or expired credentials"'


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
    if how is IndexFrom.form:
        try:
            value = (await request.form()).get("index_name")  # cached on the request, as the handler reads it
        except Exception:
            return None
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


async def check_session(request: Request, principal: Principal, session_id: str) -> None:
    """404 (the store's own message) unless the session exists, is the principal's and its index visible."""
    found = await request.app.state.sessions.session_access(session_id)
    if found is None or not session_visible(principal, found[0], found[1], request.app.state.reserved_indexes):
        raise NotFound(f"No such session: '{session_id}'.")


async def _owned(request: Request, principal: Principal) -> Decision | None:
    """The denial for a session or upload in the path that is not the principal's; None when it is (or none).
    A missing one is denied here too (before the body is validated, so a 400 cannot tell missing from
    another's), except to admins, who see every one: their requests go on to the handler as before."""
    params, store = request.path_params, request.app.state.sessions
    admin = principal.role >= Role.admin
    if "session_id" in params:
        found = await store.session_access(params["session_id"])
        if (found is None and not admin) or (found is not None and not session_visible(
                principal, found[0], found[1], request.app.state.reserved_indexes)):
            return Decision(False, 404, "not_owner", f"No such session: '{params['session_id']}'.")
    elif "file_id" in params:
        exists, owner = await store.file_owner(params["file_id"])
        if (not exists and not admin) or (exists and not owns(principal, owner)):
            return Decision(False, 404, "not_owner", f"No such file: '{params['file_id']}'.")
    for key in ("evaluation_id", "other_id"):  # evaluation runs (ragengine.evaluation)
        if key in params:
            exists, owner = await request.app.state.evaluations.store.owner_of(params[key])
            if (not exists and not admin) or (exists and not owns(principal, owner)):
                return Decision(False, 404, "not_owner", f"No such evaluation: '{params[key]}'.")
    return None


async def _limited(state: Any, principal: Principal, rule: Rule) -> Decision | None:
    """The 429 for a principal over its requests or (on LLM routes) tokens per minute; None when within.
    ``state``: the app's (``app.state``), which holds the usage counter."""
    limits, counter = principal.limits, getattr(state, "usage", None)
    if limits is None or counter is None:
        return None
    if limits.tokens_per_minute is not None and rule.llm:
        wait = await counter.tokens_wait(principal.id, limits.tokens_per_minute)
        if wait > 0:
            return Decision(False, 429, "rate_limited_tokens", f"'{principal.name}' used its {limits.tokens_per_minute} "
                            f"LLM tokens per minute; retry in {retry_after(wait)} s.", retry_after=retry_after(wait))
    if limits.requests_per_minute is not None and rule.metered:
        wait = await counter.take_request(principal.id, limits.requests_per_minute)
        if wait > 0:
            return Decision(False, 429, "rate_limited", f"'{principal.name}' made its {limits.requests_per_minute} "
                            f"requests per minute; retry in {retry_after(wait)} s.", retry_after=retry_after(wait))
    if limits.tokens_per_minute is not None:
        usage.bill_to(usage.Meter(principal.id, counter))
    return None


def _error(decision: Decision) -> EngineError:
    if decision.status == 404:
        return NotFound(decision.message, param=decision.param)
    if decision.status == 429:
        return RateLimited(decision.message, headers={"Retry-After": decision.retry_after or "60"})
    return Forbidden(decision.message)


async def authorize(request: Request) -> None:
    route = request.scope["route"].path
    rule = rule_for("GET" if request.method == "HEAD" else request.method, route)
    if rule.open:
        return
    principal = principal_of(request)
    index: str | None = None
    for index in await indexes_named(request, rule.index):  # the first denial decides
        decision = decide(principal, rule, index, reserved=request.app.state.reserved_indexes)
        if not decision.allowed:
            break
    if decision.allowed and rule.owned:
        decision = await _owned(request, principal) or decision
    if decision.allowed:
        decision = await _limited(request.app.state, principal, rule) or decision
    audit(decision, principal, request.method, route, index)
    if not decision.allowed:
        raise _error(decision)


async def authorize_call(state: Any, principal: Principal, call: str, indexes: list[str | None]) -> Decision:
    """``authorize`` for a call that is not an HTTP route of its own: an MCP tool call or resource read
    (``call`` is its key in ``access.routes.MCP_CALLS``). The same decision for each index it names (the
    first denial decides), the same rate limits (one request), the same audit line and counter (``method``
    MCP, ``route`` the call). Returns the decision; the caller answers a denial in its protocol."""
    rule = MCP_CALLS[call]
    decision, index = ALLOW, None
    for index in indexes or [None]:
        decision = decide(principal, rule, index, reserved=state.reserved_indexes)
        if not decision.allowed:
            break
    if decision.allowed:
        decision = await _limited(state, principal, rule) or decision
    audit(decision, principal, "MCP", call, index)
    return decision
