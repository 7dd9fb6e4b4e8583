"""Operational routes: ``GET /health`` (KAITO shape plus index state) and ``GET /metrics`` (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ragengine import metrics

router = APIRouter(tags=["ops"])


@router.get("/health")
async def health(request: Request) -> dict:
    """Always fast: it reads counters only. ``Degraded`` names indexes that failed to load."""
    registry = getattr(request.app.state, "registry", None)
    if registry is None:
        return {"status": "Starting", "detail": "the index registry is not ready yet"}
    status = registry.status()
    corrupt = status["corrupt"]
    detail = None
    if corrupt:
        detail = "; ".join(f"index '{n}' not loaded: {why}" for n, why in corrupt.items())
    return {"status": "Degraded" if corrupt else "Healthy", "detail": detail, **status}


@router.get("/metrics", response_class=PlainTextResponse, responses={200: {"description": "Prometheus text format."}})
async def prometheus_metrics() -> Response:
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
