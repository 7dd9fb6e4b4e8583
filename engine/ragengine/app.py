"""The engine's FastAPI application: ``create_app(settings)`` builds everything; nothing happens at import."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from ragengine import __version__, shutdown
from ragengine.access.enforce import AccessGate, AuthenticationMiddleware, authorize
from ragengine.access.limits import UsageCounter
from ragengine.access.routes import uncovered
from ragengine.access.source import AccessSource, KubernetesAPI
from ragengine.api import chat as chat_api
from ragengine.api import conversations as conversations_api
from ragengine.api import indexes as indexes_api
from ragengine.api import ops as ops_api
from ragengine.api import responses as responses_api
from ragengine.api import vector_stores as vector_stores_api
from ragengine.api import versions as versions_api
from ragengine.api.openapi import document_error_responses
from ragengine.conversations.models import UsageRow
from ragengine.errors import install_error_handlers
from ragengine.metrics import install_middleware
from ragengine.observability import requests as request_context
from ragengine.observability.tracing import Tracing
from ragengine.redact import install_log_filter
from ragengine.settings import EngineSettings


def create_app(settings: EngineSettings | None = None) -> FastAPI:
    settings = settings or EngineSettings()
    install_log_filter()  # the HTTP client logs full URLs: the LLM's may hold credentials

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Each part registers its services on app.state and its clean-up on the stack, in
        # dependency order: indexes (embedder, registry), then chat (LLM client), then conversations (the
        # session store), then vector stores (on all of those).
        async with AsyncExitStack() as stack:
            stack.callback(tracing.shutdown)  # last: the spans of the shutdown itself are exported too
            stack.push_async_callback(access.close)
            await access.watch(stack)
            await indexes_api.startup(app, settings, stack)
            await chat_api.startup(app, settings, stack)
            await conversations_api.startup(app, settings, stack)
            await vector_stores_api.startup(app, settings, stack)
            await responses_api.startup(app, settings, stack)
            # Rate limits count in the sessions' database (shared by replicas on PostgreSQL).
            app.state.usage = UsageCounter(app.state.sessions.engine, UsageRow.__table__)  # type: ignore[arg-type]  # a Table, typed FromClause
            registry = getattr(app.state, "registry", None)
            if registry is not None:
                access.index_names = registry.names
                access.check_patterns()  # warn about index patterns that match no index
            yield

    # Traces when an OTLP endpoint is configured (OTEL_* variables; docs/observability.md); a bad value
    # (an unknown protocol) stops the start here, as does a bad access file.
    tracing = Tracing.from_env("ragengine", trace_content=settings.trace_content)
    access = AccessSource(settings.api_key, settings.access_file, kubernetes=KubernetesAPI.from_settings(settings))
    # Every request passes `AccessGate` before its body is read and `authorize` after (the route's rule,
    # access/routes.py).
    app = FastAPI(title="ragengine", version=__version__, lifespan=lifespan, dependencies=[Depends(authorize)])
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
    app.include_router(chat_api.router)
    app.include_router(conversations_api.router)
    app.include_router(vector_stores_api.router)
    app.include_router(responses_api.router)
    missing = uncovered((m, r.path) for r in api_routes(app.routes) for m in r.methods or ())
    if missing:
        raise RuntimeError(f"routes without an access rule in ragengine/access/routes.py: {', '.join(missing)}")
    document_error_responses(app, auth=access.enabled, external_store=settings.vector_store != "faiss")
    return app


def api_routes(routes: Any) -> Iterator[APIRoute]:
    """Every ``APIRoute``, through included routers (recent FastAPI keeps an included router as one route)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from api_routes(route.original_router.routes)
