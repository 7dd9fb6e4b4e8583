"""OpenAI-compatible routes: ``POST /v1/chat/completions`` and ``GET /v1/models``. Adapters only."""

from __future__ import annotations

import json
import time
from contextlib import AsyncExitStack
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from ragengine.access.decide import document_acl
from ragengine.access.enforce import principal_of, visible_to
from ragengine.api.sse import sse_response
from ragengine.chat.service import ChatService, parse_request
from ragengine.chat.turn import JSONOutcome
from ragengine.errors import BadRequest, PayloadTooLarge
from ragengine.guardrails.runtime import Guardrails
from ragengine.llm.client import LLMClient
from ragengine.protocol.errors import error_responses
from ragengine.protocol.openai import MODEL_ALIAS_PREFIX, ChatCompletionRequest, ModelCard, ModelList
from ragengine.settings import EngineSettings

router = APIRouter(tags=["openai"])


async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    """The LLM client, the output policy and the chat service onto app.state; an LLM client or policy already
    there (a stand-by's, ragengine.handover) is used, with the registry there now."""
    llm: LLMClient | None = getattr(app.state, "llm", None)
    if llm is None:
        llm = LLMClient(settings)
        if app.state.tracing.enabled:  # a client span per call, its traceparent sent: vLLM's spans join the trace
            llm.http.tracing = app.state.tracing
        stack.push_async_callback(llm.aclose)
        app.state.llm = llm
    registry = getattr(app.state, "registry", None)
    if registry is not None:
        registry.chunk_tokens = llm.tokens  # chunks get the LLM's token counts at ingestion (index.chunk_tokens)
    # The output policy (RAGENGINE_GUARDRAILS_POLICY), watched for edits; the session service uses it too.
    guardrails: Guardrails | None = getattr(app.state, "guardrails", None)
    if guardrails is None:
        guardrails = Guardrails(settings.guardrails_policy, fail_open=settings.guardrails_fail_open)
        await guardrails.watch(stack)
        app.state.guardrails = guardrails
    app.state.chat = ChatService(settings, llm, registry, guardrails)


async def read_json(request: Request, limit: int):
    """The body as JSON, refusing more than ``limit`` bytes before reading them all. Any content type is
    read as JSON (curl's default form type included), as OpenAI-compatible servers do."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body is larger than {limit} bytes.")
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > limit:
            raise PayloadTooLarge(f"Request body is larger than {limit} bytes.")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise BadRequest(f"Malformed JSON body: {exc}") from None


async def received_at() -> float:
    """When the handler's dependencies start: the time to first token counts the body's reading. Async: FastAPI
    runs a plain ``def`` dependency in its thread pool (tests/engine/test_route_dependencies.py)."""
    return time.perf_counter()


async def chat_request(request: Request) -> ChatCompletionRequest:
    """The body, read within the size limit as JSON of any content type, as the typed request (a 400 naming
    the field otherwise). Read here rather than by FastAPI: curl's default form type is JSON to OpenAI's servers."""
    return parse_request(await read_json(request, request.app.state.settings.max_body_bytes))


@router.post(
    "/v1/chat/completions",
    summary="OpenAI chat completions with retrieval (index_name) or pass-through",
    responses=error_responses(404, 409, 422, 429, 502, 503, 504),
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": ChatCompletionRequest.model_json_schema(ref_template="#/components/schemas/{model}")}}}},
)
async def chat_completions(request: Request, received: Annotated[float, Depends(received_at)],
                           req: Annotated[ChatCompletionRequest, Depends(chat_request)]):
    chat: ChatService = request.app.state.chat
    outcome = await chat.create(req, received=received, acl=document_acl(principal_of(request)))
    if isinstance(outcome, JSONOutcome):
        return JSONResponse(outcome.body, headers=outcome.headers)
    return sse_response(outcome.events, headers=outcome.headers)


@router.get("/v1/models", response_model=ModelList, summary="The served model, and rag:<index> aliases",
            responses=error_responses(502, 504))
async def list_models(request: Request) -> ModelList:
    llm: LLMClient = request.app.state.llm
    cards = [ModelCard(**m) for m in await llm.list_models()] if llm.configured else []
    registry = getattr(request.app.state, "registry", None)
    for name in sorted(registry.names()) if registry is not None else []:
        if visible_to(request, name):
            cards.append(ModelCard(id=f"{MODEL_ALIAS_PREFIX}{name}", owned_by="ragengine"))
    return ModelList(data=cards)
