"""Operational routes: ``GET /health`` (shallow liveness, KAITO shape plus index state), ``GET /ready``
(readiness: can the engine answer now?) and ``GET /metrics`` (Prometheus).

They are open even when an API key is set (probes and scrapers); without the key they show status
only (``_keyed``): no index names or counts, no dependency URLs or error texts, no per-index series.
URLs in any message have their credentials masked (``redact_text``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ragengine import metrics
from ragengine.auth import key_given
from ragengine.redact import redact_text
from ragengine.settings import EngineSettings

READY_TIMEOUT_S = 2.0  # a readiness probe runs every few seconds: a dependency that slow counts as down

router = APIRouter(tags=["ops"])


def _keyed(request: Request) -> bool:
    """The caller may see details: no API key is set, or it sent the key."""
    return key_given(request.headers.get("authorization"), request.app.state.settings.api_key)


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
        status["store_error"] = redact_text(str(status["store_error"]))
        problems.append(f"vector store unavailable: {status['store_error']}")
    state = "Degraded" if problems else "Healthy"
    if not _keyed(request):  # counts of problems, no names (send the key for those)
        public = [f"{len(corrupt)} index(es) not loaded"] if corrupt else []
        public += ["vector store unavailable"] if status.get("store_error") else []
        return {"status": state, "detail": "; ".join(public) or None}
    return {"status": state, "detail": "; ".join(problems) or None, **status}


async def _check_llm(settings: EngineSettings) -> str | None:
    """None when the LLM answers ``GET /models`` and lists the configured model; else why not."""
    base = settings.llm_url.rstrip("/").removesuffix("/chat/completions")  # type: ignore[union-attr]
    headers = {"Authorization": f"Bearer {settings.llm_api_key}"} if settings.llm_api_key else {}
    try:
        async with httpx.AsyncClient(timeout=READY_TIMEOUT_S, headers=headers) as http:
            resp = await http.get(f"{base}/models")
    except httpx.HTTPError as exc:
        return f"LLM at {base} is unreachable: {type(exc).__name__}: {exc}".rstrip(": ")
    if resp.status_code >= 400:
        return f"LLM at {base} answered GET /models with HTTP {resp.status_code}"
    try:
        served = [str(m.get("id")) for m in resp.json().get("data") or [] if isinstance(m, dict)]
    except (ValueError, AttributeError):
        return f"LLM at {base} answered GET /models with something that is not a model list"
    if settings.llm_model and settings.llm_model not in served:
        return f"LLM at {base} does not serve model '{settings.llm_model}' (it serves: {', '.join(served) or 'none'})"
    return None


async def _check_embeddings(request: Request, settings: EngineSettings) -> str | None:
    if settings.embedding_url:
        base = settings.embedding_url.rstrip("/")
        try:
            async with httpx.AsyncClient(timeout=READY_TIMEOUT_S) as http:
                resp = await http.get(f"{base}/models")
        except httpx.HTTPError as exc:
            return f"embeddings at {base} are unreachable: {type(exc).__name__}: {exc}".rstrip(": ")
        # 401/404: the server is there (a key or a /models route it lacks); 5xx: it is not serving.
        return f"embeddings at {base} answered HTTP {resp.status_code}" if resp.status_code >= 500 else None
    if getattr(request.app.state, "embedder", None) is None:
        return "the embedding model is not loaded yet"
    return None


async def _check_store(request: Request) -> str | None:
    registry = getattr(request.app.state, "registry", None)
    if registry is None:
        return "the index registry is not ready yet"
    if hasattr(registry, "health"):  # external stores report reachability (None = healthy)
        try:
            return await asyncio.wait_for(registry.health(), READY_TIMEOUT_S)
        except TimeoutError:
            return f"the index store did not answer within {READY_TIMEOUT_S:g} s"
    return None


@router.get("/ready", responses={503: {"description": "A dependency is not usable; `reason` says which."}})
async def ready(request: Request) -> Any:
    """Readiness for a load balancer or a Kubernetes readinessProbe: 200 only when the LLM (if
    configured) serves the configured model, the embeddings are usable and the index store answers.
    Unlike ``/health`` it calls the dependencies (each with a short timeout, concurrently)."""
    settings: EngineSettings = request.app.state.settings
    names = ["embeddings", "store"]
    checks = [_check_embeddings(request, settings), _check_store(request)]
    if settings.llm_url:
        names.insert(0, "llm")
        checks.insert(0, _check_llm(settings))
    results = dict(zip(names, await asyncio.gather(*checks), strict=True))
    results = {name: None if why is None else redact_text(why) for name, why in results.items()}
    if not _keyed(request):  # which check fails, not why (the reasons name internal URLs)
        results = {name: None if why is None else f"{name} failing (send the API key for the reason)"
                   for name, why in results.items()}
    report = {name: ("ok" if why is None else why) for name, why in results.items()}
    failing = [why for why in results.values() if why is not None]
    if failing:
        return JSONResponse({"ready": False, "checks": report, "reason": "; ".join(failing)}, status_code=503)
    return {"ready": True, "checks": report}


@router.get("/metrics", response_class=PlainTextResponse, responses={200: {"description": "Prometheus text format."}})
async def prometheus_metrics(request: Request) -> Response:
    """Per-index series (``index`` label: the names) only with the API key, when one is set."""
    registry = metrics.REGISTRY if _keyed(request) else metrics.public_view()
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
