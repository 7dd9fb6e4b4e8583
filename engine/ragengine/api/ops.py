"""Operational routes: ``GET /health`` (KAITO shape plus index state) and ``GET /metrics`` (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ragengine import metrics

router = APIRouter(tags=["ops"])


@router.get("/health")
async def health(request: Request) -> dict:
    """Always fast: it reads counters only. ``Degraded`` names indexes that failed to load, or the
    external store's last error."""
    registry = getattr(request.app.state, "registry", None)
    if registry is None:
        return {"status": "Starting", "detail": "the index registry is not ready yet"}
    status = registry.status()
    corrupt = status["corrupt"]
    problems = [f"index '{n}' not loaded: {why}" for n, why in corrupt.items()]
    if status.get("store_error"):
        problems.append(f"vector store unavailable: {status['store_error']}")
    return {"status": "Degraded" if problems else "Healthy", "detail": "; ".join(problems) or None, **status}


@router.get("/metrics", response_class=PlainTextResponse, responses={200: {"description": "Prometheus text format."}})
async def prometheus_metrics() -> Response:
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
