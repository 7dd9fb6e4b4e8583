"""Index version routes: re-index (a new version built in the background), versions, activate (rollback or
forward), and the portable export / import of an index. Thin: ``ragengine.versions`` does the work."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ragengine.access.enforce import principal_of
from ragengine.protocol.errors import error_responses
from ragengine.protocol.versions import ImportResponse, ReindexRequest, VersionsResponse

router = APIRouter(tags=["versions"])
Version = Path(..., ge=1, le=1_000_000, description="A version number of the index.")


def _registry(request: Request):
    return request.app.state.registry


@router.post("/indexes/{index_name}/reindex", status_code=202, response_model=VersionsResponse,
             responses={200: {"description": "only_if_changed: the index has this model and chunking already.",
                              "model": VersionsResponse}, **error_responses(400, 404, 409, 413, 503)})
async def reindex(index_name: str, body: ReindexRequest, request: Request) -> JSONResponse:
    """Build a new version of the index from its stored text (another embedding model, or chunking) in the
    background; the live version serves until the new one is complete, then they swap. 202 with the job.
    With a ``gate`` (or the engine's configured one) the new version is scored first and swaps only when it
    passes; else it stays ``rejected`` with its scores (docs/evaluation.md)."""
    chunking = body.chunking.model_dump(exclude_none=True) if body.chunking else None
    gate, after = None, None
    if body.gate is not None:  # checked before anything starts; docs/evaluation.md
        await _registry(request).book(index_name)
        gate, after = await request.app.state.evaluations.prepare_gate(index_name, body.gate, principal_of(request))
    out, started = await _registry(request).reindex(index_name, chunking, body.embedding_model, body.only_if_changed,
                                                    gate)
    if started and after is not None:
        await after()
    return JSONResponse(VersionsResponse.model_validate(out).model_dump(), status_code=202 if started else 200)


@router.get("/indexes/{index_name}/reindex", response_model=VersionsResponse, responses=error_responses(404, 409))
async def reindex_progress(index_name: str, request: Request) -> dict:
    """The running (or last) job's progress, documents done of total, and the version numbers."""
    return await _registry(request).versions(index_name)


@router.get("/indexes/{index_name}/versions", response_model=VersionsResponse, responses=error_responses(404, 409))
async def versions(index_name: str, request: Request) -> dict:
    return await _registry(request).versions(index_name)


@router.post("/indexes/{index_name}/versions/{version}/activate", status_code=202, response_model=VersionsResponse,
             responses=error_responses(400, 404, 409))
async def activate(index_name: str, request: Request, version: int = Version) -> JSONResponse:
    """Make a retired version live again (rollback, or forward): it first gets the writes it missed, then
    swaps in one step. 202 with the job."""
    out = await _registry(request).activate(index_name, version)
    return JSONResponse(VersionsResponse.model_validate(out).model_dump(), status_code=202)


@router.delete("/indexes/{index_name}/versions/{version}", response_model=VersionsResponse,
               responses=error_responses(404, 409))
async def drop_version(index_name: str, request: Request, version: int = Version) -> dict:
    """Delete a retired version (not the live one, nor a running job's target) and its data."""
    return await _registry(request).drop_version(index_name, version)


@router.get("/indexes/{index_name}/export", response_class=StreamingResponse, responses={
    200: {"description": "The export file (gzip, docs/versions.md), streamed.",
          "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}},
    **error_responses(404, 409)})
async def export(index_name: str, request: Request) -> StreamingResponse:
    """The live version as one portable, compressed, checksummed file: texts, metadata, ids, chunking, the
    embedding model's identity and the vectors."""
    stream = await _registry(request).export(index_name)
    filename = index_name.encode("ascii", "replace").decode().replace('"', "_")
    return StreamingResponse(stream, media_type="application/gzip",
                             headers={"Content-Disposition": f'attachment; filename="{filename}.ragx.gz"'})


@router.post("/indexes/{index_name}/import", status_code=201, response_model=ImportResponse,
             responses=error_responses(400, 409, 413, 503), openapi_extra={"requestBody": {
                 "required": True, "description": "An export file (GET /indexes/{name}/export), streamed.",
                 "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}})
async def import_index(index_name: str, request: Request) -> JSONResponse:
    """Create index ``index_name`` from an export, read as it arrives; it appears only once the whole file
    checked out (a truncated or damaged file is refused, nothing is left behind). Vectors are kept when the
    export's embedding model is the engine's, else the texts are embedded again."""
    out = await _registry(request).import_(index_name, request.stream())
    return JSONResponse(ImportResponse.model_validate(out).model_dump(), status_code=201)
