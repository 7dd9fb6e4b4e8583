"""Evaluation routes: score an index version on a golden set in the background, read runs, compare two.
Thin: ``ragengine.evaluation`` does the work (docs/evaluation.md)."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse

from ragengine.access.enforce import principal_of
from ragengine.errors import NotFound
from ragengine.evaluation import golden
from ragengine.evaluation.config import watch_configured
from ragengine.evaluation.service import EvaluationService
from ragengine.evaluation.store import EvaluationStore
from ragengine.protocol.errors import error_responses
from ragengine.protocol.evaluations import (
    ComparisonOut,
    EvaluationList,
    EvaluationOut,
    EvaluationRequest,
    GoldenSetStored,
    GoldenSetUpload,
)
from ragengine.settings import EngineSettings

router = APIRouter(tags=["evaluations"])


def _service(request: Request) -> EvaluationService:
    return request.app.state.evaluations


@router.post("/indexes/{index_name}/evaluations", status_code=202, response_model=EvaluationOut,
             responses=error_responses(400, 404, 409, 413))
async def start(index_name: str, body: EvaluationRequest, request: Request) -> JSONResponse:
    """Score a version of the index (default: the live one) on a golden set, in the background: 202 with the
    run's id; GET it for progress, metrics and per-question results. The run sees what the caller sees
    (its document ACL applies)."""
    run = await _service(request).create(index_name, body, principal_of(request))
    return JSONResponse(EvaluationOut.model_validate(run.full()).model_dump(), status_code=202)


@router.get("/indexes/{index_name}/evaluations", response_model=EvaluationList, responses=error_responses(404))
async def list_runs(index_name: str, request: Request, limit: int = Query(20, ge=1, le=200)) -> dict:
    """The index's runs, newest first (a non-admin sees their own)."""
    runs = await _service(request).runs(index_name, principal_of(request), limit)
    return {"data": [r.summary() for r in runs]}


@router.put("/indexes/{index_name}/evaluations/golden-set", response_model=GoldenSetStored,
            responses=error_responses(400, 413))
async def put_golden_set(index_name: str, body: GoldenSetUpload, request: Request) -> dict:
    """The golden set of a source file (the operator's source sync hands it over; docs/evaluation.md): checked
    as a golden set, then kept as the index's, for the engine's evaluation file that names this source."""
    service = _service(request)
    questions = golden.parse_jsonl(body.text, service.settings.evaluation_max_questions)
    await service.store.put_golden_set(index_name, body.source, body.path, body.revision, questions)
    return {"index": index_name, "source": body.source, "path": body.path, "revision": body.revision,
            "questions": len(questions)}


@router.get("/indexes/{index_name}/evaluations/golden-set", response_model=GoldenSetStored,
            responses=error_responses(404))
async def get_golden_set(index_name: str, request: Request) -> dict:
    """The golden set a source's sync handed over for the index (its origin and size; the sync compares it)."""
    found = await _service(request).store.golden_set(index_name)
    if found is None:
        raise NotFound(f"No golden set was handed over for index '{index_name}'.")
    source, path, revision, questions, _at = found
    return {"index": index_name, "source": source, "path": path, "revision": revision, "questions": len(questions)}


@router.get("/indexes/{index_name}/evaluations/{evaluation_id}", response_model=EvaluationOut,
            responses=error_responses(404))
async def get_run(index_name: str, evaluation_id: str, request: Request) -> dict:
    return (await _service(request).get(index_name, evaluation_id, principal_of(request))).full()


@router.get("/indexes/{index_name}/evaluations/{evaluation_id}/compare/{other_id}", response_model=ComparisonOut,
            responses=error_responses(400, 404))
async def compare(index_name: str, evaluation_id: str, other_id: str, request: Request) -> dict:
    """``other`` against ``base`` (``evaluation_id``): metric deltas (other - base), and the questions whose
    ranking got better or worse."""
    return await _service(request).compare(index_name, evaluation_id, other_id, principal_of(request))


async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    """Runs in the sessions' database; the engine's evaluation file (schedule, configured gate) watched."""
    store = EvaluationStore(app.state.sessions.engine, keep=settings.evaluation_runs_kept)
    stack.callback(store.close)
    service = EvaluationService(settings, app.state.registry, store, getattr(app.state, "llm", None),
                                getattr(app.state, "guardrails", None))
    await service.start()
    stack.push_async_callback(service.close)
    app.state.evaluations = service
    if settings.evaluation_file is not None:
        task = asyncio.create_task(watch_configured(service, settings), name="evaluation-file")

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        stack.push_async_callback(stop)
