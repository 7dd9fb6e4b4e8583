"""Routes for conversations: reformulation, file uploads, sessions, threads and (streamed) messages.

Thin adapters: parse, call the store / service on ``app.state``, pick JSON or SSE. The API is
documented with curl examples in docs/conversations.md.

Access control: ``authorize`` already checked that a session or upload named in the path is the caller's
(docs/access.md); here new sessions and uploads record their creator, lists show only the caller's
(admins: everyone's), and files named in a body must be the caller's too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.responses import JSONResponse

from ragengine.access.decide import document_acl, owner_filter, visible
from ragengine.access.enforce import check_session, principal_of
from ragengine.api.sse import sse_response
from ragengine.conversations.events import error_event
from ragengine.conversations.ingestion import IngestionWorker
from ragengine.conversations.models import utcnow
from ragengine.conversations.service import ConversationService, check_session_index
from ragengine.conversations.store import SessionStore
from ragengine.errors import EngineError, NotFound, PayloadTooLarge
from ragengine.guardrails.answer import AnswerGuard
from ragengine.index.api import IndexAPI
from ragengine.protocol.conversations import (
    AttachFilesRequest,
    CreateSessionRequest,
    CreateThreadRequest,
    MessageRequest,
    MessageResponse,
    ReformulateRequest,
    ReformulateResponse,
)
from ragengine.protocol.errors import error_responses
from ragengine.protocol.paging import MAX_OFFSET, list_object
from ragengine.protocol.sse import DONE, frame
from ragengine.protocol.vector_stores import Deleted, FileList, FileObject
from ragengine.rag.reformulate import reformulate_query
from ragengine.settings import EngineSettings
from ragengine.vectorstores.objects import file_object

log = logging.getLogger(__name__)
router = APIRouter(tags=["conversations"])


def _store(request: Request) -> SessionStore:
    return request.app.state.sessions


# --- reformulation ---------------------------------------------------------------------------------
@router.post("/v1/chat/reformulate", responses=error_responses(502, 504))
async def reformulate(body: ReformulateRequest, request: Request) -> dict:
    state = request.app.state
    out = AnswerGuard(getattr(state, "guardrails", None), "reformulate")  # fail-closed: 503 before the LLM
    result = await reformulate_query(state.llm, state.settings, body.userMessage, body.conversation,
                                     system_prompt=body.systemPrompt, last_n=body.historyMessages)
    shown = out.scrub(result.query)  # the LLM wrote it: through the output policy
    out.close()
    return ReformulateResponse(
        reformulatedMessage=shown, userMessage=result.original, reformulated=result.reformulated,
        reason=result.reason, endpoint=result.endpoint, historyUsed=result.history_used,
        latencyMs=round(result.latency_ms, 2),
    ).model_dump()


# --- files (OpenAI's /v1/files on the conversation uploads; vectorstores/objects.py has the mapping) ---------
PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")


@router.post("/v1/files", status_code=202, response_model=FileObject, responses=error_responses(404, 413, 415, 422, 500))
async def upload_file(request: Request, file: UploadFile = File(...), session_id: str | None = Form(None),
                      purpose: Literal[PURPOSES] | None = Form(None),  # type: ignore[valid-type]
                      anchor: Literal["created_at"] | None = Form(None, alias="expires_after[anchor]"),
                      seconds: int | None = Form(None, alias="expires_after[seconds]", ge=3600, le=2_592_000)) -> dict:
    limit = request.app.state.settings.max_upload_bytes
    data = bytearray()
    while chunk := await file.read(1 << 20):
        data += chunk
        if len(data) > limit:
            raise PayloadTooLarge(f"The file is larger than the upload limit of {limit} bytes.")
    principal = principal_of(request)
    if session_id:
        await check_session(request, principal, session_id)  # 404 (also for another's) before storing anything
    expires_at = utcnow() + timedelta(seconds=seconds) if seconds is not None else None
    info = await request.app.state.ingestion.accept(file.filename or "upload", file.content_type, bytes(data),
                                                    principal=principal.id, purpose=purpose, expires_at=expires_at)
    if session_id:
        await _store(request).attach_files(session_id, [info.id])
    return file_object(info)


@router.get("/v1/files", response_model=FileList)
async def list_files(request: Request, status: str | None = None, purpose: str | None = None,
                     limit: int = Query(10_000, ge=1, le=10_000), order: Literal["asc", "desc"] = "desc",
                     after: str | None = None, before: str | None = None) -> dict:
    files, more = await _store(request).page_files(limit=limit, order=order, after=after, before=before,
                                                   purpose=purpose, status=status,
                                                   owned_by=owner_filter(principal_of(request)))
    return list_object([file_object(f) for f in files], more)


@router.get("/v1/files/{file_id}", response_model=FileObject, responses=error_responses(404))
async def get_file(file_id: str, request: Request) -> dict:
    return file_object(await _store(request).get_file(file_id))


@router.delete("/v1/files/{file_id}", response_model=Deleted, responses=error_responses(404))
async def delete_file(file_id: str, request: Request) -> dict:
    await _store(request).get_file(file_id)  # 404 before touching any vector store
    await request.app.state.vector_stores.forget_file(file_id)
    await request.app.state.ingestion.delete(file_id)
    return {"id": file_id, "object": "file", "deleted": True}


# --- sessions --------------------------------------------------------------------------------------
@router.post("/v1/sessions", status_code=201, responses=error_responses(404))
async def create_session(body: CreateSessionRequest, request: Request) -> dict:
    store, principal = _store(request), principal_of(request)
    check_session_index(body.index_name, request.app.state.settings)
    mine = owner_filter(principal)
    for fid in body.file_ids:
        await store.get_file(fid, owned_by=mine)  # 404 (also for another's) before creating the session
    info = await store.create_session(user_id=body.user_id, title=body.title, index_name=body.index_name,
                                      metadata=body.metadata, principal=principal.id)
    if body.file_ids:
        await store.attach_files(info.id, body.file_ids, owned_by=mine)
    return {**info.to_dict(), "session_id": info.id}  # the seed's clients read session_id


@router.get("/v1/sessions")
async def list_sessions(request: Request, user_id: str | None = None, limit: int = Query(100, ge=1, le=1000),
                        offset: int = Query(0, ge=0, le=MAX_OFFSET)) -> dict:
    principal, reserved = principal_of(request), request.app.state.reserved_indexes
    sessions = await _store(request).list_sessions(
        user_id=user_id, limit=limit, offset=offset, owned_by=owner_filter(principal),
        index_visible=lambda index: index is None or visible(principal, index, reserved))
    return {"data": [s.to_dict() for s in sessions]}


@router.get("/v1/sessions/{session_id}", responses=error_responses(404))
async def get_session(session_id: str, request: Request) -> dict:
    store = _store(request)
    info = await store.get_session(session_id)
    files = await store.session_files(session_id)
    return {**info.to_dict(), "files": [file_object(f) for f in files],
            "threads": [t.to_dict() for t in await store.list_threads(session_id)]}


@router.delete("/v1/sessions/{session_id}", responses=error_responses(404))
async def delete_session(session_id: str, request: Request) -> dict:
    await _store(request).delete_session(session_id)
    return {"id": session_id, "deleted": True}


@router.get("/v1/sessions/{session_id}/messages", responses=error_responses(404))
async def get_messages(session_id: str, request: Request, thread_id: str = "main",
                       last: int | None = Query(None, ge=1, le=100_000)) -> dict:
    messages = await _store(request).history(session_id, thread_id, last=last)
    return {"session_id": session_id, "thread_id": thread_id, "data": [m.to_dict() for m in messages]}


@router.post("/v1/sessions/{session_id}/messages", responses=error_responses(404, 409, 422, 429, 502, 504))
async def post_message(session_id: str, body: MessageRequest, request: Request):
    service: ConversationService = request.app.state.conversations
    principal = principal_of(request)
    events = service.run(session_id, body, acl=document_acl(principal), files_of=owner_filter(principal))
    first = await anext(events)  # unknown session/thread → 404 before any stream starts
    if body.stream:
        interval = request.app.state.settings.sse_keepalive_s
        return sse_response(_sse(first, events), keepalive_s=interval)
    last = first
    async for evt in events:
        last = evt
    return JSONResponse(MessageResponse(session_id=session_id, thread_id=first["thread_id"],
                                        user_message=first["user_message"],
                                        assistant_message=last["assistant_message"]).model_dump())


async def _sse(first: dict, events: AsyncIterator[dict]) -> AsyncIterator[str]:
    yield frame(first)
    try:
        async for evt in events:
            yield frame(evt)
    except EngineError as exc:
        yield frame(error_event(exc))
    except Exception as exc:  # after the 200 went out an error can only be an event
        log.exception("session message failed mid-stream")
        yield frame(error_event(exc))
    yield DONE


# --- files of a session ----------------------------------------------------------------------------
@router.get("/v1/sessions/{session_id}/files", responses=error_responses(404))
async def session_files(session_id: str, request: Request) -> dict:
    return {"data": [file_object(f) for f in await _store(request).session_files(session_id)]}


@router.post("/v1/sessions/{session_id}/files", responses=error_responses(404))
async def attach_files(session_id: str, body: AttachFilesRequest, request: Request) -> dict:
    await _store(request).attach_files(session_id, body.file_ids, owned_by=owner_filter(principal_of(request)))
    return await session_files(session_id, request)


@router.delete("/v1/sessions/{session_id}/files/{file_id}", responses=error_responses(404))
async def detach_file(session_id: str, file_id: str, request: Request) -> dict:
    await _store(request).detach_file(session_id, file_id)
    return {"session_id": session_id, "file_id": file_id, "detached": True}


# --- threads ---------------------------------------------------------------------------------------
@router.post("/v1/sessions/{session_id}/threads", status_code=201, responses=error_responses(404))
async def create_thread(session_id: str, body: CreateThreadRequest, request: Request) -> dict:
    thread = await _store(request).create_thread(session_id, body.parent_message_id, title=body.title,
                                                 thread_id=body.new_thread_id)
    return thread.to_dict()


@router.get("/v1/sessions/{session_id}/threads", responses=error_responses(404))
async def list_threads(session_id: str, request: Request) -> dict:
    return {"data": [t.to_dict() for t in await _store(request).list_threads(session_id)]}


@router.get("/v1/sessions/{session_id}/threads/{thread_id}", responses=error_responses(404))
async def get_thread(session_id: str, thread_id: str, request: Request) -> dict:
    store = _store(request)
    thread = await store.get_thread(session_id, thread_id)
    messages = await store.history(session_id, thread_id)
    return {**thread.to_dict(), "messages": [m.to_dict() for m in messages]}


# --- start-up --------------------------------------------------------------------------------------
async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    """Session store (tables created), ingestion worker and TTL clean-up; all stopped on shutdown."""
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = SessionStore(settings.sessions_url, threads=settings.session_store_threads)
    await asyncio.to_thread(store.create_tables)
    stack.callback(store.close)
    registry: IndexAPI = app.state.registry  # indexes start first (services.start)
    ingestion = IngestionWorker(store, registry, settings, tracing_=app.state.tracing)
    await ingestion.start()
    stack.push_async_callback(ingestion.stop)
    app.state.sessions = store
    app.state.ingestion = ingestion
    app.state.conversations = ConversationService(settings, store, registry, app.state.llm,
                                                  getattr(app.state, "embedder", None),
                                                  getattr(app.state, "guardrails", None))
    if settings.session_ttl_s > 0:
        task = asyncio.create_task(_cleanup_loop(app, store, ingestion, settings), name="session-ttl-cleanup")

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        stack.push_async_callback(stop)


async def cleanup_once(store: SessionStore, ingestion: IngestionWorker, ttl_s: int,
                       vector_stores: Any = None) -> dict[str, Any]:
    """Sessions idle past the TTL, session uploads left unattached as long, and files past their
    ``expires_at`` (which leave their vector stores first)."""
    sessions = await store.delete_expired(ttl_s)
    files = list({f.id: f for f in await store.orphan_files(ttl_s) + await store.expired_files()}.values())
    if vector_stores is not None:
        for f in files:
            await vector_stores.forget_file(f.id)
    for f in files:
        with contextlib.suppress(NotFound):  # another replica's clean-up deleted it first
            await ingestion.delete(f.id)
    if sessions or files:
        log.info("TTL clean-up removed %d sessions and %d unattached files", len(sessions), len(files))
    return {"sessions": sessions, "files": [f.id for f in files]}


async def _cleanup_loop(app: FastAPI, store: SessionStore, ingestion: IngestionWorker, settings: EngineSettings) -> None:
    interval = min(settings.session_cleanup_interval_s, max(1.0, settings.session_ttl_s / 4))
    while True:
        try:
            await cleanup_once(store, ingestion, settings.session_ttl_s, getattr(app.state, "vector_stores", None))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session clean-up failed; retrying in %.0f s", interval)
        await asyncio.sleep(interval)
