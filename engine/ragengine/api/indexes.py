"""KAITO-compatible index routes: thin adapters from HTTP to ``IndexRegistry``."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI, File, Form, Query, Request, Response, UploadFile

from ragengine.access.decide import document_acl
from ragengine.access.enforce import principal_of, visible_to
from ragengine.errors import BadRequest, PayloadTooLarge, Unprocessable
from ragengine.index.documents import MAX_DOC_ID, DocSearch
from ragengine.metrics import EMBEDDING_BACKEND
from ragengine.protocol.errors import error_responses
from ragengine.protocol.indexes import (
    DeleteDocumentsRequest,
    DeleteDocumentsResponse,
    DocumentOut,
    IndexRequest,
    ListDocumentsResponse,
    MessageResponse,
    RetrieveRequest,
    RetrieveResponse,
    UpdateDocumentsRequest,
    UpdateDocumentsResponse,
    UpdateMetadataRequest,
)
from ragengine.protocol.paging import MAX_OFFSET, MAX_TEXT_LENGTH
from ragengine.settings import EngineSettings
from ragengine.versions.registry import SERVED, VersionedRegistry

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder
    from ragengine.retrieval.rerank import Reranker

log = logging.getLogger(__name__)
MAX_SEARCH = 1000  # characters of a documents search: a needle longer than this is a 422, not a slow scan
router = APIRouter(tags=["indexes"])


def _registry(request: Request) -> VersionedRegistry:
    registry: VersionedRegistry = request.app.state.registry
    return registry


@router.post("/index", response_model=list[DocumentOut], responses=error_responses(409, 500, 502, 504))
async def index_documents(body: IndexRequest, request: Request) -> list[dict]:
    chunking = body.chunking.model_dump(exclude_none=True) if body.chunking else None
    docs = [d.model_dump(include={"text", "metadata", "doc_id"}) for d in body.documents]
    return await _registry(request).add_documents(body.index_name, docs, chunking)


@router.post("/index/files", response_model=list[DocumentOut],
             responses=error_responses(400, 409, 413, 415, 422, 500, 502, 504))
async def index_files(request: Request, index_name: str = Form(...), files: list[UploadFile] = File(...),
                      metadata: str | None = Form(None, description="JSON object added to every document."),
                      chunking: str | None = Form(None, description="JSON: chunking for a NEW index, as /index."),
                      ocr_languages: str | None = Form(None, description="Tesseract languages, '+'-joined "
                                                       "(default: settings.ocr_languages).")) -> list[dict]:
    """Files (PDF, DOCX, PPTX, XLSX, CSV, images, and every text format of ``/index``'s sources) read by
    the bounded parser, one document per page, slide or sheet (``page`` / ``slide`` / ``sheet`` in its
    metadata) or per file; a file over a budget, unreadable or of another type is a 4xx naming it, and
    nothing is indexed."""
    from ragengine.api.files import documents_of

    extra = _json_form(metadata, "metadata")
    options = _json_form(chunking, "chunking")
    settings = request.app.state.settings
    docs: list[dict] = []
    for upload in files:
        data = bytearray()
        while block := await upload.read(1 << 20):
            data += block
            if len(data) > settings.max_upload_bytes:
                raise PayloadTooLarge(f"{upload.filename!r} is larger than the upload limit of "
                                      f"{settings.max_upload_bytes} bytes.")
        docs += await documents_of(request.app, upload.filename or "file", bytes(data), extra, ocr_languages)
    return await _registry(request).add_documents(index_name, docs, options)


def _json_form(value: str | None, name: str) -> dict | None:
    import json

    if value is None or not value.strip():
        return None
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise BadRequest(f"{name} must be a JSON object: {exc}") from exc
    if not isinstance(parsed, dict):
        raise BadRequest(f"{name} must be a JSON object.")
    return parsed


@router.get("/indexes", response_model=list[str])
async def list_indexes(request: Request) -> list[str]:
    return [name for name in await _registry(request).list_names() if visible_to(request, name)]


@router.get("/indexes/{index_name}/documents", response_model=ListDocumentsResponse, responses=error_responses(400, 404, 409))
async def list_documents(
    index_name: str,
    request: Request,
    limit: int = Query(10, ge=1, le=100),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    max_text_length: int | None = Query(1000, ge=1, le=MAX_TEXT_LENGTH),
    metadata_filter: str | None = Query(None, description="JSON object; exact match on every key."),
    search: str | None = Query(None, max_length=MAX_SEARCH, description="Documents whose id or text contains this "
                               "(case-insensitive); total_items counts the matches."),
    doc_id: str | None = Query(None, max_length=MAX_DOC_ID, description="Only the document with this id."),
) -> dict:
    return await _registry(request).list_documents(index_name, limit=limit, offset=offset,
                                                   max_text_length=max_text_length, metadata_filter=metadata_filter,
                                                   acl=document_acl(principal_of(request)),
                                                   search=DocSearch.of(search, doc_id))


@router.post("/indexes/{index_name}/documents", response_model=UpdateDocumentsResponse,
             responses=error_responses(404, 409, 500, 502, 504))
async def update_documents(index_name: str, body: UpdateDocumentsRequest, request: Request) -> dict:
    docs = [d.model_dump(include={"text", "metadata", "doc_id"}) for d in body.documents]
    return await _registry(request).update_documents(index_name, docs)


@router.post("/indexes/{index_name}/documents/metadata", response_model=UpdateDocumentsResponse,
             responses=error_responses(404, 409, 500))
async def update_metadata(index_name: str, body: UpdateMetadataRequest, request: Request) -> dict:
    """Replace documents' metadata, keeping their text, chunks and vectors: nothing is embedded (a change of
    split_type, language or title re-chunks, as on the update route). The sources' ACL rules use it."""
    docs = [d.model_dump() for d in body.documents]
    return await _registry(request).update_metadata(index_name, docs)


@router.post("/indexes/{index_name}/documents/delete", response_model=DeleteDocumentsResponse,
             responses=error_responses(404, 409, 500))
async def delete_documents(index_name: str, body: DeleteDocumentsRequest, request: Request) -> dict:
    return await _registry(request).delete_documents(index_name, body.doc_ids)


@router.delete("/indexes/{index_name}", response_model=MessageResponse, responses=error_responses(400, 404, 500))
async def delete_index(index_name: str, request: Request) -> dict:
    await _registry(request).delete_index(index_name)
    evaluations = getattr(request.app.state, "evaluations", None)
    if evaluations is not None:  # its runs go with it
        await evaluations.forget_index(index_name)
    return {"message": f"Successfully deleted index {index_name}."}


PERSIST_PATH = ("One folder name under <data_dir>/persist/ (default: the index's name). An existing folder there "
                "is replaced only when it holds an index snapshot (409 otherwise).")


@router.post("/persist/{index_name}", response_model=MessageResponse, responses=error_responses(400, 404, 409, 500))
async def persist_index(index_name: str, request: Request, path: str | None = Query(None, description=PERSIST_PATH)) -> dict:
    where = await _registry(request).persist(index_name, path)
    return {"message": f"Successfully persisted index {index_name} to {where}."}


@router.post("/load/{index_name}", response_model=MessageResponse, responses=error_responses(400, 404, 409, 500))
async def load_index(index_name: str, request: Request, path: str | None = Query(None, description=PERSIST_PATH),
                     overwrite: bool = Query(False)) -> dict:
    where = await _registry(request).load(index_name, path, overwrite)
    return {"message": f"Successfully loaded index {index_name} from {where}."}


@router.post("/retrieve", response_model=RetrieveResponse, response_model_exclude_unset=True,  # explain's fields
             responses=error_responses(404, 409, 502, 504))
async def retrieve(body: RetrieveRequest, request: Request, response: Response) -> dict:
    settings = request.app.state.settings
    if body.max_node_count > settings.max_top_k:
        raise Unprocessable(f"max_node_count must be between 1 and {settings.max_top_k}.")
    nodes = await _registry(request).retrieve(body.index_name, body.query, body.max_node_count,
                                             filters=body.filters, metadata_filter=body.metadata_filter,
                                             max_chunks_per_document=body.max_chunks_per_document,
                                             long_query_windows=body.long_query_windows,
                                             acl=document_acl(principal_of(request)))
    results = [n.to_result(body.explain) for n in nodes]
    served = SERVED.get()
    if served is not None:  # which version of the index answered, with which model (docs/versions.md)
        response.headers["X-Index-Version"] = str(served[0])
        response.headers["X-Embedding-Model"] = served[1].encode("ascii", "replace").decode()
    out = {"query": body.query, "results": results, "count": len(results)}
    if body.explain:
        out["explain"] = {"hybrid": settings.hybrid, "fusion": settings.fusion, "dense_weight": settings.fusion_dense_weight,
                          "candidates": settings.fusion_candidates, "reranked": _registry(request).reranker is not None,
                          "similarity_threshold": settings.similarity_threshold}
    return out


async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack, *, read_only: bool = False) -> None:
    """Build the embedder, reranker and index registry (FAISS restored from disk, or an external store) onto
    app.state; an embedder or reranker already there is used. ``read_only``: a FAISS stand-by's registry
    (ragengine.handover), loaded beside the process that writes the folder: no embedding-file watcher and
    no sample index (both write)."""
    from ragengine.embedding import build_embedder
    from ragengine.embedding.early import take as take_early
    from ragengine.embedding.pool import ModelRef, read_target, watch_target
    from ragengine.versions import build_registry

    target, generation = ModelRef.from_settings(settings), None
    if settings.embedding_file is not None and settings.embedding_file.exists():
        target, generation = read_target(settings.embedding_file, settings)  # a bad file stops the start here
    embedder: Embedder | None = getattr(app.state, "embedder", None)
    if embedder is None:
        wanted = target.settings_for(settings)
        # ``ragengine serve`` started loading it beside its imports (embedding/early.py)
        early: Embedder | None = await take_early(wanted)
        loaded = early if early is not None else await asyncio.to_thread(build_embedder, wanted)
        app.state.embedder = embedder = loaded
        stack.callback(loaded.close)
    EMBEDDING_BACKEND.labels(embedder.backend.name).set(1)
    reranker: Reranker | None = getattr(app.state, "reranker", None)
    if reranker is None and settings.rerank_model:
        from ragengine.retrieval.rerank import Reranker

        cache = str(settings.embedding_cache_dir) if settings.embedding_cache_dir else None
        reranker = await asyncio.to_thread(Reranker, settings.rerank_model, settings.device, cache)
        app.state.reranker = reranker
        stack.callback(reranker.close)
    registry = build_registry(settings, embedder, reranker, target, generation)
    stack.callback(registry.embedders.close)  # after the registry's close (the stack unwinds in reverse)
    await registry.start(read_only=read_only)
    app.state.registry = registry
    if read_only:
        return
    stack.push_async_callback(registry.close)
    if settings.embedding_file is not None:
        async def retarget(ref: ModelRef, gen: int | None) -> None:
            await registry.set_target(ref, gen)
            app.state.embedder = registry.embedder

        watcher = asyncio.create_task(watch_target(settings.embedding_file, settings, retarget), name="embedding-file")
        stack.callback(watcher.cancel)
    if settings.load_sample_index and not registry.exists("sample"):
        from ragengine.sample import load_sample_index

        await load_sample_index(registry)
