"""The engine's services, started onto an app's state in dependency order: indexes (embedder, registry), then
chat (LLM client), then conversations (the session store), then vector stores (on all of those), then
responses, MCP and evaluations; then the rate limits' counter and the access file's index names. Each part registers its clean-up
on ``stack``. ``create_app``'s lifespan runs ``start`` on the app; a stand-by's take-over
(``ragengine.handover``) on a state of its own, which then becomes the app's."""

from __future__ import annotations

from contextlib import AsyncExitStack

from fastapi import FastAPI

from ragengine.access.limits import UsageCounter
from ragengine.api import chat as chat_api
from ragengine.api import conversations as conversations_api
from ragengine.api import evaluations as evaluations_api
from ragengine.api import indexes as indexes_api
from ragengine.api import mcp as mcp_api
from ragengine.api import responses as responses_api
from ragengine.api import vector_stores as vector_stores_api
from ragengine.conversations.models import UsageRow
from ragengine.settings import EngineSettings


async def start(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    await indexes_api.startup(app, settings, stack)
    await chat_api.startup(app, settings, stack)
    await conversations_api.startup(app, settings, stack)
    await vector_stores_api.startup(app, settings, stack)
    await responses_api.startup(app, settings, stack)
    await mcp_api.startup(app, settings, stack)  # the MCP session manager, on the registry and access
    if getattr(app.state, "registry", None) is not None:
        await evaluations_api.startup(app, settings, stack)  # runs and the gate, on the registry and sessions
    # Rate limits count in the sessions' database (shared by replicas on PostgreSQL).
    app.state.usage = UsageCounter(app.state.sessions.engine, UsageRow.__table__)  # type: ignore[arg-type]  # a Table, typed FromClause
    registry = getattr(app.state, "registry", None)
    if registry is not None:
        access = app.state.access
        access.index_names = registry.names
        access.check_patterns()  # warn about index patterns that match no index
