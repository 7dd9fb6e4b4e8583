"""Each index's documents as MCP resources (``ragengine://<index>/<doc_id>``, text/plain).

Contract:

- ``resources/list`` pages through the documents of every index the caller may see, in index-name order,
  ``PAGE`` at a time, each through the caller's document ACL; ``nextCursor`` is opaque (the index and offset
  to go on from). A cursor naming an index the caller no longer sees goes on with the next one it does: the
  answer depends only on what the caller may see. A malformed cursor is a protocol error (-32602).
- ``resources/read`` gives one document's whole text. A URI that is not a document's is -32602; a document
  that does not exist, or that the caller may not see (its index hidden, or its ACL), is -32002 ("Resource
  not found", the MCP specification's code) with the same message either way; over a rate limit, -32000
  with ``retryAfter`` in its data.
- Both are authorized and counted like the tools (``access.enforce.authorize_call``), and each has a span.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from ragengine.access.decide import document_acl, missing_index_message
from ragengine.errors import EngineError
from ragengine.mcp import shapes
from ragengine.mcp.caller import Denied, admit, call_span, caller_of, visible_indexes
from ragengine.protocol.paging import MAX_OFFSET

PAGE = 100
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for resources/read of an unknown resource
SERVER_ERROR = -32000  # JSON-RPC's implementation-defined range: over a rate limit
TEMPLATE = f"{shapes.SCHEME}://{{index}}/{{doc_id}}"


def encode_cursor(index: str, offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([index, offset]).encode()).decode()


def decode_cursor(cursor: str) -> tuple[str, int]:
    try:
        index, offset = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError, binascii.Error):
        raise MCPError(INVALID_PARAMS, "Invalid cursor: pass back the nextCursor of a previous page.") from None
    if not isinstance(index, str) or not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= MAX_OFFSET:
        raise MCPError(INVALID_PARAMS, "Invalid cursor: pass back the nextCursor of a previous page.")
    return index, offset


def _protocol_error(exc: Denied) -> MCPError:
    decision = exc.decision
    if decision.status == 429:
        return MCPError(SERVER_ERROR, decision.message, {"status": 429, "retryAfter": int(decision.retry_after or 60)})
    return MCPError(RESOURCE_NOT_FOUND, decision.message)


async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    caller = caller_of(ctx)
    start, offset = decode_cursor(params.cursor) if params is not None and params.cursor else ("", 0)
    with call_span(caller, "resources/list"):
        try:
            await admit(caller, "resources/list", [None])
        except Denied as exc:
            raise _protocol_error(exc) from None
        listed: list[types.Resource] = []
        acl = document_acl(caller.principal)
        for index in (n for n in await visible_indexes(caller) if n >= start):
            at = offset if index == start else 0
            try:
                page = await caller.state.registry.list_documents(index, limit=PAGE - len(listed), offset=at,
                                                                  max_text_length=0, acl=acl)
            except EngineError:  # gone since it was listed (deleted meanwhile), or not servable now
                continue
            listed += [_resource(index, d["doc_id"], d.get("metadata") or {}) for d in page["documents"]]
            if len(listed) >= PAGE:
                more = at + len(page["documents"]) < page["total_items"]
                return types.ListResourcesResult(resources=listed, next_cursor=encode_cursor(
                    index, at + len(page["documents"])) if more else _after(index))
        return types.ListResourcesResult(resources=listed)


def _after(index: str) -> str:
    """The cursor of the index after ``index`` (names sort after ``index + "\\0"`` exactly when they sort after it)."""
    return encode_cursor(index + "\0", 0)


def _resource(index: str, doc_id: str, metadata: dict) -> types.Resource:
    return types.Resource(uri=shapes.uri(index, doc_id), name=shapes.ref(index, doc_id),
                          title=shapes.title_of(doc_id, metadata), mime_type="text/plain",
                          description=f"A document of index '{index}'.")


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    parsed = shapes.parse_uri(str(params.uri))
    if parsed is None:
        raise MCPError(INVALID_PARAMS, f"Not a document's URI: expected {TEMPLATE}.")
    caller = caller_of(ctx)
    index, doc_id = parsed
    with call_span(caller, "resources/read"):
        try:
            await admit(caller, "resources/read", [index])
            doc = await caller.state.registry.get_document(index, doc_id, acl=document_acl(caller.principal))
        except Denied as exc:
            raise _protocol_error(exc) from None
        except EngineError as exc:
            if exc.message == missing_index_message(index):
                raise MCPError(RESOURCE_NOT_FOUND, exc.message) from None
            raise MCPError(SERVER_ERROR, exc.message, {"status": exc.status_code}) from None
        if doc is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"No such document: '{shapes.ref(index, doc_id)}'.")
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=shapes.uri(index, doc_id), mime_type="text/plain", text=doc.text)])


async def list_templates(ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
    caller_of(ctx)
    return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
        uri_template=TEMPLATE, name="document", title="A document of an index", mime_type="text/plain",
        description="One whole document: its index and its doc_id, each percent-encoded.")])

