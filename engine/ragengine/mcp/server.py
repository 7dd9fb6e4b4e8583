"""The MCP server: the official SDK's low-level ``Server`` with the engine's tools and resources.

Contract:

- Who calls: the HTTP request that carried the message (``ctx.request``, on both protocol eras) holds the
  principal the authentication middleware put on it (``request.state.principal``), so a session's calls
  are each judged by the credentials they came with, never by the session's first request.
- Every tool call and resource read goes through ``access.enforce.authorize_call``: the same decision as
  the HTTP routes (an index the caller may not see answers exactly like a missing one), the same rate limits
  (one call, one request) and audit; documents pass through the caller's document ACL before top-k.
- Tool failures (bad arguments, a missing or hidden index or document, a rate limit) are tool results with
  ``isError`` and the engine's message, which the model reads; an unknown tool is a protocol error
  (-32602). One span per call (``mcp tools/call <tool>``, ``mcp resources/read``), a child of the HTTP
  request's server span.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from pydantic import ValidationError

from ragengine import __version__
from ragengine.access.decide import Decision, document_acl, visible
from ragengine.access.enforce import authorize_call
from ragengine.access.rules import Principal
from ragengine.errors import BadRequest, EngineError, NotFound, Unprocessable
from ragengine.mcp import shapes
from ragengine.observability import tracing
from ragengine.observability.logs import REQUEST_ID

MAX_FANOUT = 16  # indexes one search without ``index`` may cover
INSTRUCTIONS = ("This server is a knowledge base. Use search to find passages relevant to a question (optionally in "
                "one index: list_indexes names them), then fetch a result's id for the whole document. Documents "
                "are also resources (ragengine://<index>/<doc_id>).")


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


async def described(caller: Caller, names: list[str]) -> list[shapes.IndexInfo]:
    """What each index holds: the engine's ``mcp_descriptions``, else its vector store's description."""
    configured = caller.state.settings.mcp_descriptions
    stores = getattr(caller.state, "vector_stores", None)
    records = await stores.catalog.stores() if stores is not None and set(names) - set(configured) else {}
    infos = []
    for name in names:
        record = records.get(name)
        infos.append(shapes.IndexInfo(name=name, description=configured.get(name) or (record and record.description)))
    return infos


async def _search(caller: Caller, args: shapes.SearchArgs) -> dict:
    max_top_k = caller.state.settings.max_top_k
    if args.top_k > max_top_k:
        raise Unprocessable(f"top_k must be between 1 and {max_top_k}.")
    names: list[str | None] = [args.index] if args.index is not None else list(await visible_indexes(caller))
    if len(names) > MAX_FANOUT:
        raise BadRequest(f"You may search {len(names)} indexes: name one with 'index' (list_indexes names them).")
    await admit(caller, "tools/call search", names)
    acl = document_acl(caller.principal)

    async def one(name: str) -> list[dict]:
        nodes = await caller.state.registry.retrieve(
            name, args.query, args.top_k, filters=args.filters, metadata_filter=args.metadata_filter,
            max_chunks_per_document=1, acl=acl)  # document-level: one result (its best passage) per document
        return [shapes.search_result(name, n.to_result()) for n in nodes]

    found = await asyncio.gather(*(one(n) for n in names if n is not None))
    return {"results": shapes.best_first([r for rs in found for r in rs], args.top_k)}


async def _fetch(caller: Caller, args: shapes.FetchArgs) -> dict:
    parsed = shapes.parse_ref(args.id)
    if parsed is None:
        raise BadRequest("id must be '<index>/<doc_id>', as a search result gives it.")
    index, doc_id = parsed
    await admit(caller, "tools/call fetch", [index])
    doc = await caller.state.registry.get_document(index, doc_id, acl=document_acl(caller.principal))
    if doc is None:  # missing, or hidden by its ACL: the same answer
        raise NotFound(f"No such document: '{args.id}'.")
    return shapes.fetched(index, doc_id, doc.text, doc.metadata)


async def _list_indexes(caller: Caller, _args: shapes.ListIndexesArgs) -> dict:
    await admit(caller, "tools/call list_indexes", [None])
    return {"indexes": [i.model_dump() for i in await described(caller, await visible_indexes(caller))]}


HANDLERS: dict[str, Callable[[Caller, Any], Awaitable[dict]]] = {
    "search": _search, "fetch": _fetch, "list_indexes": _list_indexes}


async def list_tools(ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    caller = caller_of(ctx)
    names = await visible_indexes(caller)
    infos = await described(caller, names[:shapes.DESCRIBED_INDEXES])
    infos += [shapes.IndexInfo(name=n) for n in names[shapes.DESCRIBED_INDEXES:]]
    return types.ListToolsResult(tools=shapes.tools(infos, caller.state.settings.max_top_k))


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name not in HANDLERS:
        raise MCPError(INVALID_PARAMS, f"Unknown tool: '{params.name[:200]}'. The tools are {', '.join(HANDLERS)}.")
    caller = caller_of(ctx)
    with call_span(caller, f"tools/call {params.name}", tool=params.name) as span:
        try:
            args = shapes.arguments(params.name, params.arguments)
            payload = await HANDLERS[params.name](caller, args)
        except ValidationError as exc:
            tracing.annotate(span, outcome="invalid_arguments")
            return shapes.failure(shapes.argument_problem(exc))
        except Denied as exc:
            tracing.annotate(span, outcome=exc.decision.reason)
            return shapes.failure(exc.decision.message)
        except EngineError as exc:
            tracing.annotate(span, outcome=exc.error_type)
            return shapes.failure(exc.message)
        tracing.annotate(span, outcome="ok", results=len(payload.get("results", payload.get("indexes", [None]))))
        return shapes.result(payload)


def build_server() -> Server[Any]:
    from ragengine.mcp import resources

    return Server("ragengine", version=__version__, title="ragengine knowledge base", instructions=INSTRUCTIONS,
                  get_tool_input_schema=shapes.input_schema, on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=resources.list_resources, on_read_resource=resources.read_resource,
                  on_list_resource_templates=resources.list_templates)
