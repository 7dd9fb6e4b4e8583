"""OpenAI's Responses routes: ``POST /v1/responses`` (JSON or SSE) and the stored responses. Adapters only."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Literal

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse

from ragengine.access.decide import document_acl, owner_filter
from ragengine.access.enforce import principal_of
from ragengine.api.chat import read_json
from ragengine.api.sse import sse_response
from ragengine.errors import BadRequest
from ragengine.protocol.errors import error_responses
from ragengine.protocol.paging import cursor_page, list_object
from ragengine.protocol.responses import InputItemList, ResponseDeleted, ResponseObject, ResponseRequest
from ragengine.responses.service import ResponsesService
from ragengine.responses.store import ResponseStore
from ragengine.settings import EngineSettings

router = APIRouter(tags=["responses"])
# One server-sent event of a streamed response (``stream: true``): its type, and the event's JSON in ``data``.
SSE_EVENT = {"type": "object", "required": ["event", "data"], "properties": {
    "event": {"type": "string", "description": "response.created, response.output_text.delta, ... (docs/openai.md)"},
    "data": {"type": "string", "description": "The event as JSON, with its 'type' and 'sequence_number'."}}}


async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    store = ResponseStore(app.state.sessions.engine)
    app.state.responses = ResponsesService(settings, app.state.llm, app.state.vector_stores, store,
                                           getattr(app.state, "guardrails", None))


def _owner(request: Request) -> str | None:
    """Whose responses the caller sees: their own; an admin's: everyone's (None)."""
    return owner_filter(principal_of(request))


def _service(request: Request) -> ResponsesService:
    return request.app.state.responses


@router.post(
    "/v1/responses", response_model=ResponseObject, summary="OpenAI responses with file_search",
    responses={**error_responses(404, 409, 422, 429, 502, 503, 504),
               200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": ResponseRequest.model_json_schema(ref_template="#/components/schemas/{model}")}}}},
)
async def create_response(request: Request):
    body = await read_json(request, request.app.state.settings.max_body_bytes)
    result = await _service(request).create(body, _owner(request), acl=document_acl(principal_of(request)))
    if isinstance(result, dict):
        return JSONResponse(result)
    return sse_response(result, keepalive_s=request.app.state.settings.sse_keepalive_s)


@router.get("/v1/responses/{response_id}", response_model=ResponseObject, responses=error_responses(404))
async def get_response(response_id: str, request: Request) -> dict:
    body, _items = await _service(request).store.get(response_id, _owner(request))
    return body


@router.delete("/v1/responses/{response_id}", response_model=ResponseDeleted, responses=error_responses(404))
async def delete_response(response_id: str, request: Request) -> dict:
    await _service(request).store.delete(response_id, _owner(request))
    return {"id": response_id, "object": "response", "deleted": True}


@router.get("/v1/responses/{response_id}/input_items", response_model=InputItemList, responses=error_responses(404))
async def list_input_items(response_id: str, request: Request, limit: int = Query(20, ge=1, le=100),
                           order: Literal["asc", "desc"] = "desc", after: str | None = None,
                           before: str | None = None) -> dict:
    _body, items = await _service(request).store.get(response_id, _owner(request))
    try:
        page, more = cursor_page(items, lambda i: i["id"], limit=limit, order=order, after=after, before=before)
    except KeyError as exc:
        raise BadRequest(f"Unknown cursor '{exc.args[0]}': not an item of this response.", param="after") from None
    return list_object(page, more)
