"""Operational routes: ``GET /health`` (shallow liveness, KAITO shape plus index state and what the engine
last saw of its LLM), ``GET /ready`` (readiness: can the engine serve what it serves itself?) and
``GET /metrics`` (Prometheus).

The LLM is not part of readiness: without it the engine still serves retrieval, the document API and
extractive answers, so a vLLM that restarts, downloads its model or is scaled to zero must not take the
engine's endpoints away (ragengine/llm/availability.py). /ready reports it beside the checks.

They are open without credentials (probes and scrapers); without an admin's key they show status
only (``_keyed``): no index names or counts, no dependency URLs or error texts, no per-index series.
URLs in any message have their credentials masked (``redact_text``)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ragengine import metrics
from ragengine.access.rules import Role
from ragengine.redact import redact_text
from ragengine.settings import EngineSettings

READY_TIMEOUT_S = 2.0  # a readiness probe runs every few seconds: a dependency that slow counts as down

router = APIRouter(tags=["ops"])


def _keyed(request: Request) -> bool:
    """The caller may see details: access control is off, or it sent an admin's key (a key from the
    keyring only: a probe never waits on a TokenReview; a reader, or an admin of some indexes only, sees no
    names), or the operator's status key for this engine (``status_key_sha256``), which opens nothing else."""
    keyring = request.app.state.access.keyring()
    if not keyring.enabled:
        return True
    header = request.headers.get("authorization") or ""
    token = header[len("Bearer "):].strip() if header.startswith("Bearer ") else ""
    status_digest = request.app.state.settings.status_key_sha256
    if token and status_digest and hmac.compare_digest(hashlib.sha256(token.encode()).hexdigest(), status_digest):
        return True
    principal = keyring.authenticate(token) if token else None
    # An admin of some indexes only would learn every other index's name and size: details need "*".
    return principal is not None and principal.role is Role.admin and "*" in principal.indexes


@router.get("/health")
async def health(request: Request) -> dict:
    """Always fast: it reads counters only. ``Degraded`` names indexes that failed to load, or the
    external store's last error."""
    registry = getattr(request.app.state, "registry", None)
    if registry is None:
        return {"status": "Starting", "detail": "the index registry is not ready yet"}
    handover = getattr(request.app.state, "handover", None)
    standby = handover.report() if handover is not None else None  # a FAISS stand-by (ragengine.handover)
    status = registry.status()
    corrupt = status["corrupt"]
    problems = [f"index '{n}' not loaded: {why}" for n, why in corrupt.items()]
    if status.get("store_error"):
        status["store_error"] = redact_text(str(status["store_error"]))
        problems.append(f"vector store unavailable: {status['store_error']}")
    state = "Degraded" if problems else "Healthy"
    # "embedding": the registry's models (target, loaded) and the backend in use, side by side
    embedding = {**(status.get("embedding") or {}), **_embedding_report(request).get("embedding", {})}
    if not _keyed(request):  # counts of problems, no names (send the key for those)
        public = [f"{len(corrupt)} index(es) not loaded"] if corrupt else []
        public += ["vector store unavailable"] if status.get("store_error") else []
        # (index names, versions and models need the key: the operator, which holds none, then reports the
        # indexes as unknown; docs/versions.md)
        return {"status": state, "detail": "; ".join(public) or None, **_llm_report(request),
                **({"handover": standby} if standby else {})}
    evaluations = getattr(request.app.state, "evaluations", None)  # each index's last run (status.evaluation)
    return {"status": state, "detail": "; ".join(problems) or None, **status,
            **({"embedding": embedding} if embedding else {}), **_llm_report(request),
            **({"handover": standby} if standby else {}),
            **({"evaluation": evaluations.health()} if evaluations is not None else {})}


def _embedding_report(request: Request) -> dict[str, Any]:
    """``{"embedding": {"backend", "note"}}``: the backend in use, and why when it is the slow one (the note
    names a folder of the machine: left out when the API needs a key, as the LLM's reasons are)."""
    embedder = getattr(request.app.state, "embedder", None)
    if embedder is None:
        return {}
    note = getattr(embedder, "backend_note", None)
    if note and not _keyed(request):
        note = "a slow embedding backend runs: the engine's log says why and how to fix it"
    return {"embedding": {"backend": embedder.backend.name, "note": note}}


def _llm_report(request: Request) -> dict[str, Any]:
    """``{"llm": ...}`` from what the engine last saw (no call): the reasons name internal URLs, so they
    are left out when the API needs a key (/health and /ready stay open)."""
    llm = getattr(request.app.state, "llm", None)
    if llm is None:
        return {}
    report = llm.availability.to_dict(reasons=_keyed(request))
    return {"llm": {k: redact_text(v) if isinstance(v, str) else v for k, v in report.items()}}


async def _check_llm(llm: Any, settings: EngineSettings) -> str | None:
    """None when the LLM answers ``GET /models`` and lists the configured model; else why not. Asked through
    the LLM client's own session (its key, proxy and connections: no new client and TLS context per probe)."""
    from ragengine.llm import http

    base = settings.llm_url.rstrip("/").removesuffix("/chat/completions")  # type: ignore[union-attr]
    try:
        resp = await llm.http.send("GET", f"{base}/models", timeout_s=READY_TIMEOUT_S)
        status = resp.status
        body = await http.read_body(resp)
    except http.TransportFailed as exc:
        return f"LLM at {base} is unreachable: {exc}".rstrip(": ")
    if status >= 400:
        return f"LLM at {base} answered GET /models with HTTP {status}"
    try:
        served = [str(m.get("id")) for m in json.loads(body).get("data") or [] if isinstance(m, dict)]
    except (ValueError, AttributeError):
        return f"LLM at {base} answered GET /models with something that is not a model list"
    if settings.llm_model and settings.llm_model not in served:
        return f"LLM at {base} does not serve model '{settings.llm_model}' (it serves: {', '.join(served) or 'none'})"
    return None


async def _check_embeddings(request: Request, settings: EngineSettings) -> str | None:
    # The embedding file's target URL when the operator renders one (a generation), else the settings' as
    # they are now (they may change at runtime).
    registry = getattr(request.app.state, "registry", None)
    target = getattr(getattr(registry, "embedders", None), "target", None)
    by_file = getattr(registry, "generation", None) is not None
    url = target.url if target is not None and by_file else settings.embedding_url
    if url:
        import httpx

        base = url.rstrip("/")
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


async def _observe_llm(request: Request, settings: EngineSettings) -> None:
    """Ask the LLM (GET /models) and record the answer for /health; never part of readiness."""
    llm = getattr(request.app.state, "llm", None)
    if llm is None or not settings.llm_url:
        return
    why = await _check_llm(llm, settings)
    if why is None:
        llm.availability.ok()
    else:
        llm.availability.down(why)


@router.get("/ready", responses={503: {"description": "A dependency is not usable; `reason` says which."}})
async def ready(request: Request) -> Any:
    """Readiness for a load balancer or a Kubernetes readinessProbe: 200 when the embeddings are usable
    and the index store answers, whether or not the LLM does (``llm`` reports it; see the module's
    docstring). Unlike ``/health`` it calls them (each with a short timeout, concurrently)."""
    settings: EngineSettings = request.app.state.settings
    if request.app.state.drain.active:  # SIGTERM: the load balancer sends no new client here (ragengine/shutdown.py)
        return JSONResponse({"ready": False, "reason": "shutting down"}, status_code=503)
    names = ["embeddings", "store"]
    *found, _ = await asyncio.gather(_check_embeddings(request, settings), _check_store(request),
                                     _observe_llm(request, settings))
    results = dict(zip(names, found, strict=True))
    results = {name: None if why is None else redact_text(why) for name, why in results.items()}
    if not _keyed(request):  # which check fails, not why (the reasons name internal URLs)
        results = {name: None if why is None else f"{name} failing (send the API key for the reason)"
                   for name, why in results.items()}
    report = {name: ("ok" if why is None else why) for name, why in results.items()}
    failing = [why for why in results.values() if why is not None]
    body = {"ready": not failing, "checks": report, **_llm_report(request)}
    if failing:
        return JSONResponse({**body, "reason": "; ".join(failing)}, status_code=503)
    return body


@router.get("/metrics", response_class=PlainTextResponse, responses={200: {"description": "Prometheus text format."}})
async def prometheus_metrics(request: Request) -> Response:
    """Per-index series (``index`` label: the names) only with the API key, when one is set."""
    registry = metrics.REGISTRY if _keyed(request) else metrics.public_view()
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
