"""OpenAI's vector store routes: thin adapters over ``vectorstores.service.VectorStores`` (docs/openai.md).

Access control has checked the store's index (``IndexFrom.store``); here the caller's identity reaches the
service where it matters: only the caller's own uploads can be attached (admins: anyone's), and searches
and file contents pass through the caller's document ACL."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Literal

from fastapi import APIRouter, FastAPI, Query, Request, Response

from ragengine.access.decide import document_acl, owner_filter
from ragengine.access.enforce import principal_of, visible_to
from ragengine.protocol.errors import error_responses
from ragengine.protocol.vector_stores import (
    CreateFileBatchRequest,
    CreateVectorStoreFileRequest,
    CreateVectorStoreRequest,
    Deleted,
    FileBatchObject,
    FileContentPage,
    SearchPage,
    SearchRequest,
    UpdateVectorStoreFileRequest,
    UpdateVectorStoreRequest,
    VectorStoreFileList,
    VectorStoreFileObject,
    VectorStoreList,
    VectorStoreObject,
)
from ragengine.settings import EngineSettings
from ragengine.vectorstores.catalog import Catalog
from ragengine.vectorstores.ingest import VectorStoreIngestion
from ragengine.vectorstores.service import VectorStores

router = APIRouter(tags=["vector stores"])
BASE = "/v1/vector_stores/{vector_store_id}"
POLL_AFTER_MS = "200"  # OpenAI's hint to the SDK's *_and_poll helpers (their default is one second)
Order = Literal["asc", "desc"]
Status = Literal["in_progress", "completed", "failed", "cancelled"]


def _stores(request: Request) -> VectorStores:
    return request.app.state.vector_stores


def _may_see(request: Request):
    return lambda name: visible_to(request, name)


def _files_of(request: Request) -> str | None:
    """Whose uploads the caller may attach: their own (admins: anyone's), as for sessions."""
    return owner_filter(principal_of(request))


async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    """The catalog (in the session store's database) and the ingestion workers; after conversations."""
    catalog = Catalog(app.state.sessions.engine)
    ingestion = VectorStoreIngestion(catalog, app.state.sessions, app.state.registry, app.state.embedder, settings)
    await ingestion.start()
    stack.push_async_callback(ingestion.stop)
    app.state.vector_store_ingestion = ingestion
    app.state.vector_stores = VectorStores(settings, catalog, app.state.sessions, app.state.registry, app.state.llm,
                                           ingestion, app.state.reserved_indexes, getattr(app.state, "guardrails", None))


@router.post("/v1/vector_stores", response_model=VectorStoreObject, responses=error_responses(404, 409, 500))
async def create_vector_store(body: CreateVectorStoreRequest, request: Request) -> dict:
    return await _stores(request).create(body, _may_see(request), files_of=_files_of(request))


@router.get("/v1/vector_stores", response_model=VectorStoreList)
async def list_vector_stores(request: Request, limit: int = Query(20, ge=1, le=100), order: Order = "desc",
                             after: str | None = None, before: str | None = None) -> dict:
    return await _stores(request).list_stores(_may_see(request), limit=limit, order=order, after=after, before=before)


@router.post(f"{BASE}/search", response_model=SearchPage, responses=error_responses(404, 502, 504))
async def search_vector_store(vector_store_id: str, body: SearchRequest, request: Request) -> dict:
    return await _stores(request).search(vector_store_id, body, acl=document_acl(principal_of(request)))


@router.post(f"{BASE}/files", response_model=VectorStoreFileObject, responses=error_responses(404))
async def attach_file(vector_store_id: str, body: CreateVectorStoreFileRequest, request: Request,
                      response: Response) -> dict:
    response.headers["openai-poll-after-ms"] = POLL_AFTER_MS
    return await _stores(request).attach(vector_store_id, body, files_of=_files_of(request))


@router.get(f"{BASE}/files", response_model=VectorStoreFileList, responses=error_responses(404))
async def list_files(vector_store_id: str, request: Request, limit: int = Query(20, ge=1, le=100),
                     order: Order = "desc", after: str | None = None, before: str | None = None,
                     filter: Status | None = None) -> dict:
    return await _stores(request).list_files(vector_store_id, limit=limit, order=order, after=after, before=before,
                                             status=filter)


@router.get(f"{BASE}/files/{{file_id}}", response_model=VectorStoreFileObject, responses=error_responses(404))
async def get_file(vector_store_id: str, file_id: str, request: Request, response: Response) -> dict:
    response.headers["openai-poll-after-ms"] = POLL_AFTER_MS
    return await _stores(request).get_file(vector_store_id, file_id)


@router.post(f"{BASE}/files/{{file_id}}", response_model=VectorStoreFileObject, responses=error_responses(404, 409))
async def update_file(vector_store_id: str, file_id: str, body: UpdateVectorStoreFileRequest, request: Request) -> dict:
    return await _stores(request).update_file(vector_store_id, file_id, body.attributes)


@router.delete(f"{BASE}/files/{{file_id}}", response_model=Deleted, responses=error_responses(404))
async def detach_file(vector_store_id: str, file_id: str, request: Request) -> dict:
    return await _stores(request).detach(vector_store_id, file_id)


@router.get(f"{BASE}/files/{{file_id}}/content", response_model=FileContentPage, responses=error_responses(404))
async def file_content(vector_store_id: str, file_id: str, request: Request) -> dict:
    return await _stores(request).file_content(vector_store_id, file_id, acl=document_acl(principal_of(request)))


@router.post(f"{BASE}/file_batches", response_model=FileBatchObject, responses=error_responses(404))
async def create_batch(vector_store_id: str, body: CreateFileBatchRequest, request: Request, response: Response) -> dict:
    response.headers["openai-poll-after-ms"] = POLL_AFTER_MS
    return await _stores(request).create_batch(vector_store_id, body, files_of=_files_of(request))


@router.get(f"{BASE}/file_batches/{{batch_id}}", response_model=FileBatchObject, responses=error_responses(404))
async def get_batch(vector_store_id: str, batch_id: str, request: Request, response: Response) -> dict:
    response.headers["openai-poll-after-ms"] = POLL_AFTER_MS
    return await _stores(request).get_batch(vector_store_id, batch_id)


@router.post(f"{BASE}/file_batches/{{batch_id}}/cancel", response_model=FileBatchObject,
             responses=error_responses(404))
async def cancel_batch(vector_store_id: str, batch_id: str, request: Request) -> dict:
    return await _stores(request).cancel_batch(vector_store_id, batch_id)


@router.get(f"{BASE}/file_batches/{{batch_id}}/files", response_model=VectorStoreFileList,
            responses=error_responses(404))
async def list_batch_files(vector_store_id: str, batch_id: str, request: Request,
                           limit: int = Query(20, ge=1, le=100), order: Order = "desc", after: str | None = None,
                           before: str | None = None, filter: Status | None = None) -> dict:
    return await _stores(request).list_files(vector_store_id, limit=limit, order=order, after=after, before=before,
                                             status=filter, batch_id=batch_id)


# Last in /openapi.json: clients and fuzzers that follow its order reach a store's files before deleting it.
@router.get(BASE, response_model=VectorStoreObject, responses=error_responses(404))
async def get_vector_store(vector_store_id: str, request: Request) -> dict:
    return await _stores(request).get(vector_store_id)


@router.post(BASE, response_model=VectorStoreObject, responses=error_responses(404))
async def update_vector_store(vector_store_id: str, body: UpdateVectorStoreRequest, request: Request) -> dict:
    return await _stores(request).update(vector_store_id, body)


@router.delete(BASE, response_model=Deleted, responses=error_responses(404, 500))
async def delete_vector_store(vector_store_id: str, request: Request) -> dict:
    return await _stores(request).delete(vector_store_id)
