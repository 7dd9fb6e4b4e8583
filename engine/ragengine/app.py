"""The engine's FastAPI application: ``create_app(settings)`` builds everything; nothing happens at import."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from ragengine import __version__, handover, preflight, shutdown
from ragengine.access.enforce import AccessGate, AuthenticationMiddleware, authorize
from ragengine.access.routes import uncovered
from ragengine.access.source import AccessSource, KubernetesAPI
from ragengine.api import chat as chat_api
from ragengine.api import console as console_api
from ragengine.api import conversations as conversations_api
from ragengine.api import evaluations as evaluations_api
from ragengine.api import indexes as indexes_api
from ragengine.api import mcp as mcp_api
from ragengine.api import names as names_api
from ragengine.api import ops as ops_api
from ragengine.api import responses as responses_api
from ragengine.api import vector_stores as vector_stores_api
from ragengine.api import versions as versions_api
from ragengine.api.openapi import document_error_responses
from ragengine.errors import install_error_handlers
from ragengine.metrics import install_middleware
from ragengine.observability import requests as request_context
from ragengine.observability.tracing import Tracing
from ragengine.protocol.names import unchecked
from ragengine.redact import install_log_filter
from ragengine.settings import EngineSettings


def create_app(settings: EngineSettings | None = None) -> FastAPI:
    settings = settings or EngineSettings()
    install_log_filter()  # the HTTP client logs full URLs: the LLM's may hold credentials

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # First of all: data a newer engine wrote stops the start here, before any part has written anything
        # (ragengine.preflight).
        await preflight.prepare(settings)
        async with AsyncExitStack() as stack:
            stack.callback(tracing.shutdown)  # last: the spans of the shutdown itself are exported too
            stack.push_async_callback(access.close)
            await access.watch(stack)
            # ragengine.services, or (FAISS, another process still holds the data folder) a stand-by that
            # serves reads at once and takes the services over later (ragengine.handover)
            await handover.start(app, settings, stack)
            yield

    # Traces when an OTLP endpoint is configured (OTEL_* variables; docs/observability.md); a bad value
    # (an unknown protocol) stops the start here, as does a bad access file.
    tracing = Tracing.from_env("ragengine", trace_content=settings.trace_content)
    access = AccessSource(settings.api_key, settings.access_file, kubernetes=KubernetesAPI.from_settings(settings))
    # Every request passes `AccessGate` before its body is read: its path's names and ids (protocol/names.py),
    # then what its route's rule (access/routes.py) decides without a body. Then every route's handler runs
    # after `check_names` (every name, the body's too: api/names.py), then, in a stand-by, what it does not
    # serve waits for the take-over (`handover.hold`), then `authorize`: the index a body names, and what the
    # gate left to the writer's services in a stand-by.
    app = FastAPI(title="ragengine", version=__version__, lifespan=lifespan,
                  dependencies=[Depends(names_api.check_names), Depends(handover.hold), Depends(authorize)])
    app.state.settings = settings
    app.state.tracing = tracing
    app.state.access = access
    app.state.reserved_indexes = frozenset({settings.conversation_index})
    install_error_handlers(app, settings)
    app.add_middleware(AccessGate)  # inside authentication: the principal is known, the body not yet read
    app.add_middleware(AuthenticationMiddleware, source=access)
    install_middleware(app, settings)  # body limit and request metrics, so they see 401s too
    request_context.install(app, tracing)  # request ids, access log, server spans
    shutdown.install(app)  # `Connection: close` on every answer while draining: outermost of all
    app.include_router(ops_api.router)
    app.include_router(indexes_api.router)
    app.include_router(versions_api.router)
    app.include_router(evaluations_api.router)
    app.include_router(chat_api.router)
    app.include_router(conversations_api.router)
    app.include_router(vector_stores_api.router)
    app.include_router(responses_api.router)
    if settings.mcp_enabled:
        app.include_router(mcp_api.router)
    app.include_router(console_api.router)
    if settings.console_enabled:
        app.include_router(console_api.pages)
    operations = [(m, r.path) for r in api_routes(app.routes) for m in r.methods or ()]
    app.state.features = console_api.features(operations)
    missing = uncovered(operations)
    if missing:
        raise RuntimeError(f"routes without an access rule in ragengine/access/routes.py: {', '.join(missing)}")
    unruled = unchecked([p for r in api_routes(app.routes) for p in r.param_convertors])
    if unruled:
        raise RuntimeError(f"path parameters without a rule in ragengine/protocol/names.py: {', '.join(unruled)}")
    faiss = settings.vector_store == "faiss"
    document_error_responses(app, auth=access.enabled, external_store=not faiss,
                             standby=faiss and settings.handover_standby)
    return app


def api_routes(routes: Any) -> Iterator[APIRoute]:
    """Every ``APIRoute``, through included routers (recent FastAPI keeps an included router as one route)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from api_routes(route.original_router.routes)
