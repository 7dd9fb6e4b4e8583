"""The engine's FastAPI application: ``create_app(settings)`` builds everything; nothing happens at import."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from ragengine import __version__
from ragengine.api import chat as chat_api
from ragengine.api import conversations as conversations_api
from ragengine.api import indexes as indexes_api
from ragengine.api import ops as ops_api
from ragengine.api.openapi import document_error_responses
from ragengine.auth import BearerAuthMiddleware
from ragengine.errors import install_error_handlers
from ragengine.metrics import install_middleware
from ragengine.redact import install_log_filter
from ragengine.settings import EngineSettings


def create_app(settings: EngineSettings | None = None) -> FastAPI:
    settings = settings or EngineSettings()
    install_log_filter()  # the HTTP client logs full URLs: the LLM's may hold credentials

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Each part registers its services on app.state and its clean-up on the stack, in
        # dependency order: indexes (embedder, registry), then chat (LLM client), then conversations.
        async with AsyncExitStack() as stack:
            await indexes_api.startup(app, settings, stack)
            await chat_api.startup(app, settings, stack)
            await conversations_api.startup(app, settings, stack)
            yield

    app = FastAPI(title="ragengine", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    install_error_handlers(app, settings)
    if settings.api_key:
        app.add_middleware(BearerAuthMiddleware, api_key=settings.api_key)
    install_middleware(app, settings)  # body limit and request metrics; outermost, so they see 401s too
    app.include_router(ops_api.router)
    app.include_router(indexes_api.router)
    app.include_router(chat_api.router)
    app.include_router(conversations_api.router)
    document_error_responses(app, auth=bool(settings.api_key), external_store=settings.vector_store != "faiss")
    return app
