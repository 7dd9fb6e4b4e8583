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
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError

from ragengine import __version__
from ragengine.access.decide import document_acl
from ragengine.errors import BadRequest, EngineError, NotFound, Unprocessable
from ragengine.mcp import resources, shapes
from ragengine.mcp.caller import Caller, Denied, admit, call_span, caller_of, visible_indexes
from ragengine.observability import tracing

MAX_FANOUT = 16  # indexes one search without ``index`` may cover
INSTRUCTIONS = ("This server is a knowledge base. Use search to find passages relevant to a question (optionally in "
                "one index: list_indexes names them), then fetch a result's id for the whole document. Documents "
                "are also resources (ragengine://<index>/<doc_id>).")


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
    return Server("ragengine", version=__version__, title="ragengine knowledge base", instructions=INSTRUCTIONS,
                  get_tool_input_schema=shapes.input_schema, on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=resources.list_resources, on_read_resource=resources.read_resource,
                  on_list_resource_templates=resources.list_templates)
