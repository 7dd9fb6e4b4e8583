"""Where access is enforced: authentication and authorization in two middlewares, before any body is read,
and one app-wide dependency for the index a body names.

- ``AuthenticationMiddleware`` (outside routing) turns the ``Authorization`` header into a principal for
  every path but the open ones (probes, metrics, the console's files), ``/openapi.json`` and ``/docs`` included, and
  answers 401 itself (503 when a ServiceAccount token cannot be reviewed right now, 429 when the caller's address
  sent more unknown tokens than the review budget allows: access/serviceaccounts.py). The principal rides on
  ``request.state.principal``.
- ``AccessGate`` (inside it, still outside routing) resolves the route the request will reach and decides
  everything that needs no body: first the names and ids in its path, by their rules (``protocol.names``: a
  400, as ``api.names.check_names`` answers it, before anything is looked up), then, by the route's rule in
  ``access.routes.ROUTES``, the index of the path (or vector store), the role (a role below the route's is
  403 whatever index a body would name), the ownership of the session, upload or evaluation run the path
  names (404 otherwise, as for a missing one) and the caller's rate limits (429 with ``Retry-After``). A
  refusal is answered there, before a byte of the body is read, with ``Connection: close`` so the server
  does not read the rest either: a read-only key cannot make the engine read (and FastAPI parse) a large
  body only to refuse it (issue 41). In a FAISS stand-by (``ragengine.handover``), on a route it holds
  until the take-over, the gate decides the role and the index only: ownership and rate limits need the
  writer's services (the sessions' store, the shared rate counter), so ``authorize`` decides them after
  the wait.
- ``authorize`` runs before every route's handler (``FastAPI(dependencies=[...])``, after ``check_names``
  and ``handover.hold``), which FastAPI calls once it has read the body: for the routes whose index a body
  names (``index_name``, the chat model alias, a response's ``file_search`` tools, a form field) it applies
  ``access.decide`` to that index, and it decides what the gate left to it. It runs before body validation,
  so a caller who may not see an index learns nothing from a 422 either. Then the LLM tokens the request
  spends are billed to the caller (``access.usage``).
- ``authorize_call`` applies ``access.routes.MCP_CALLS`` to each MCP tool call and resource read, as
  ``authorize`` applies ``ROUTES`` (the ``/mcp`` route itself is gated like any other).
- Handlers that list indexes call ``visible_to(request, name)``; lists of sessions and uploads use
  ``owner_filter``; retrieval takes ``document_acl(principal_of(request))``.

Every denial is one structured log line (principal, method, route, index, reason) on the
``ragengine.access`` logger, and every decision is counted by principal, kind and outcome (once per request).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request

from ragengine.access import usage
from ragengine.access.decide import ALLOW, Decision, decide, owns, session_visible, visible
from ragengine.access.limits import retry_after
from ragengine.access.routes import MCP_CALLS, ROUTES, IndexFrom, Rule, is_open, rule_for
from ragengine.access.rules import Principal, Role
from ragengine.access.serviceaccounts import ReviewThrottled, ReviewUnavailable
from ragengine.access.source import AccessSource
from ragengine.errors import EngineError, Forbidden, NotFound, RateLimited, error_body_for
from ragengine.metrics import ACCESS_DECISIONS, matched_route
from ragengine.protocol import names
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


async def _answer(send: Any, path: str, status: int, message: str, error_type: str, extra: list,
                  param: str | None = None, code: str | None = None) -> None:
    """An error answered by a middleware, before the body was read: ``Connection: close``, so the server
    does not read (and discard) the rest of a body nobody will use."""
    payload = json.dumps(error_body_for(path, status, message, error_type, param, code)).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra,
        (b"connection", b"close"),
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


async def _owned(state: Any, params: dict[str, Any], principal: Principal) -> Decision | None:
    """The denial for a session or upload in the path that is not the principal's; None when it is (or none).
    A missing one is denied here too (before the body is validated, so a 400 cannot tell missing from
    another's), except to admins, who see every one: their requests go on to the handler as before."""
    store = state.sessions
    admin = principal.role >= Role.admin
    if "session_id" in params:
        found = await store.session_access(params["session_id"])
        if (found is None and not admin) or (found is not None and not session_visible(
                principal, found[0], found[1], state.reserved_indexes)):
            return Decision(False, 404, "not_owner", f"No such session: '{params['session_id']}'.")
    elif "file_id" in params:
        exists, owner = await store.file_owner(params["file_id"])
        if (not exists and not admin) or (exists and not owns(principal, owner)):
            return Decision(False, 404, "not_owner", f"No such file: '{params['file_id']}'.")
    for key in ("evaluation_id", "other_id"):  # evaluation runs (ragengine.evaluation)
        if key in params:
            exists, owner = await state.evaluations.store.owner_of(params[key])
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
    return None


def _error(decision: Decision) -> EngineError:
    if decision.status == 404:
        return NotFound(decision.message, param=decision.param)
    if decision.status == 429:
        return RateLimited(decision.message, headers={"Retry-After": decision.retry_after or "60"})
    return Forbidden(decision.message)


# Where a body names the index: decided by ``authorize`` once the body is read; the rest before it.
NAMED_IN_BODY = frozenset({IndexFrom.body, IndexFrom.form, IndexFrom.chat, IndexFrom.tools})
GATED = "ragengine.gated"  # in the request's state: the gate decided all but a body's index


def route_rule(method: str, template: str | None) -> Rule | None:
    """The rule of a matched route (HEAD is GET's); None for routes outside the table (/openapi.json, /docs)."""
    if template is None:
        return None
    return ROUTES.get(("GET" if method.upper() == "HEAD" else method.upper(), template))


def path_index(rule: Rule, params: dict[str, Any]) -> str | None:
    """The index the path names (or the vector store, whose id is its index's name); None on other routes."""
    if rule.index is IndexFrom.path:
        return params.get("index_name")
    if rule.index is IndexFrom.store:
        return params.get("vector_store_id")
    return None


async def _checked(state: Any, principal: Principal, rule: Rule, params: dict[str, Any]) -> Decision | None:
    """What needs the writer's services: the session, upload or run the path names, then the rate limits
    (after ownership, so a refused request is not counted). The denial, or None."""
    if rule.owned:
        denied = await _owned(state, params, principal)
        if denied is not None:
            return denied
    return await _limited(state, principal, rule)


def _meter(state: Any, principal: Principal) -> None:
    """Bill the LLM tokens the rest of this request (or MCP call) spends to ``principal`` (access.usage)."""
    limits, counter = principal.limits, getattr(state, "usage", None)
    if limits is not None and limits.tokens_per_minute is not None and counter is not None:
        usage.bill_to(usage.Meter(principal.id, counter, limits.tokens_per_minute))


async def _refuse(send: Any, path: str, error: EngineError) -> None:
    await _answer(send, path, error.status_code, error.message, error.error_type,
                  [(k.lower().encode(), v.encode()) for k, v in (error.headers or {}).items()], error.param, error.code)


class AccessGate:
    """Authorization before the body is read (see the module's docstring). Inside ``AuthenticationMiddleware``.

    First the path's names and ids, by their rules (``protocol.names``: a 400 before anything is looked up,
    as ``api.names.check_names`` answers it); then the route's rule. In a FAISS stand-by, a route it holds
    until it takes its folder over (``ragengine.handover``) gets its role and index decided here and the rest
    (ownership, rate limits) after the wait, by ``authorize``: the sessions' store and the writer's rate
    counter are not there before it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        principal = (scope.get("state") or {}).get("principal") if scope["type"] == "http" else None
        if principal is None:  # not HTTP, or an open path (no credentials asked)
            await self.app(scope, receive, send)
            return
        route, params = matched_route(scope)
        rule = route_rule(scope["method"], getattr(route, "path", None))
        if rule is None or rule.open:  # no route (the router answers 404/405), or the spec and docs pages
            await self.app(scope, receive, send)
            return
        state, method = scope["app"].state, "GET" if scope["method"] == "HEAD" else scope["method"]
        handover = getattr(state, "handover", None)
        ready = handover is None or not handover.holds(method, rule)
        index = path_index(rule, params)
        try:
            names.check_path(params)
            decision = decide(principal, rule, index, reserved=state.reserved_indexes)
            if decision.allowed and ready:
                decision = await _checked(state, principal, rule, params) or decision
        except EngineError as exc:  # a bad name (400); the session store unreachable: as the handlers answer it
            await _refuse(send, scope["path"], exc)
            return
        if not decision.allowed or (ready and rule.index not in NAMED_IN_BODY):
            audit(decision, principal, scope["method"], route.path, index)
        if not decision.allowed:
            await _refuse(send, scope["path"], _error(decision))
            return
        if ready:
            scope["state"][GATED] = True
        await self.app(scope, receive, send)


async def authorize(request: Request) -> None:
    """After the body is read (and, in a stand-by, the wait for the take-over: ``handover.hold``): the index a
    body names, for the routes that take it from there, and what ``AccessGate`` left to the writer's
    services; then the caller's LLM tokens are metered."""
    route = request.scope["route"].path
    rule = rule_for("GET" if request.method == "HEAD" else request.method, route)
    if rule.open:
        return
    principal, state = principal_of(request), request.app.state
    gated = bool(request.scope.get("state", {}).get(GATED))
    decision, index = ALLOW, path_index(rule, request.path_params)
    if rule.index in NAMED_IN_BODY:
        for index in await indexes_named(request, rule.index):  # the first denial decides
            decision = decide(principal, rule, index, reserved=state.reserved_indexes)
            if not decision.allowed:
                break
    elif not gated:
        decision = decide(principal, rule, index, reserved=state.reserved_indexes)
    if decision.allowed and not gated:
        decision = await _checked(state, principal, rule, request.path_params) or decision
    if rule.index in NAMED_IN_BODY or not gated:
        audit(decision, principal, request.method, route, index)
    if not decision.allowed:
        raise _error(decision)
    _meter(state, principal)


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
    if decision.allowed:
        _meter(state, principal)
    return decision
