"""Who makes an MCP call and whether they may: the caller (the app's state, the principal the authentication
middleware put on the HTTP request, the request's trace context), its span, and the access decision the HTTP
routes take too (``access.enforce.authorize_call``). The tools (``server.py``) and the resources
(``resources.py``) both build on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from ragengine.access.decide import Decision, visible
from ragengine.access.enforce import authorize_call
from ragengine.access.rules import Principal
from ragengine.observability import tracing
from ragengine.observability.logs import REQUEST_ID


class Denied(Exception):
    """Access control refused the call (``decision`` says why: 404 hidden or missing index, 429 over a limit)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.message)
        self.decision = decision


@dataclass(frozen=True)
class Caller:
    state: Any  # the engine app's state: registry, settings, usage counter, tracing
    principal: Principal
    scope_state: dict  # the HTTP request's scope["state"]: its trace context and request id


def caller_of(ctx: Any) -> Caller:
    request = ctx.request
    scope_state = (request.scope.get("state") or {}) if request is not None else {}
    if "principal" not in scope_state:  # only the engine's /mcp route serves this server
        raise MCPError(INVALID_REQUEST, "This server is served over the engine's authenticated /mcp endpoint only.")
    return Caller(request.app.state, scope_state["principal"], scope_state)


@contextlib.contextmanager
def call_span(caller: Caller, name: str, **attributes: Any) -> Iterator[Any]:
    """The call's span and log context, whichever task the SDK runs the handler in (a legacy session's own)."""
    activated = tracing.activate(caller.state.tracing)
    rid = REQUEST_ID.set(caller.scope_state.get("request_id"))
    try:
        with tracing.stage(f"mcp {name}", parent=caller.scope_state.get("otel_context"),
                           principal=caller.principal.id, **attributes) as span:
            yield span
    finally:
        REQUEST_ID.reset(rid)
        tracing.deactivate(activated)


async def admit(caller: Caller, call: str, indexes: list[str | None]) -> None:
    decision = await authorize_call(caller.state, caller.principal, call, indexes)
    if not decision.allowed:
        raise Denied(decision)


async def visible_indexes(caller: Caller) -> list[str]:
    names = await caller.state.registry.list_names()
    return sorted(n for n in names if visible(caller.principal, n, caller.state.reserved_indexes))
