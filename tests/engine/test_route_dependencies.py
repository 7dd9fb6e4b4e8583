"""Every dependency of every route is a coroutine function: FastAPI runs a plain ``def`` dependency in its
thread pool, a thread hop per request on the event loop's path (the chat route's ``received_at`` was one,
issue 45). Read from the app's own routes, so a new route or dependency is covered."""

from __future__ import annotations

import inspect

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from ragengine.app import create_app
from ragengine.settings import EngineSettings


def _dependencies(dependant: Dependant):
    for sub in dependant.dependencies:
        yield sub
        yield from _dependencies(sub)


def _routes(routes):
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):  # an included router kept as one route (recent FastAPI)
            yield from _routes(route.original_router.routes)


def test_no_route_dependency_runs_in_the_thread_pool(tmp_path):
    app = create_app(EngineSettings(data_dir=tmp_path))
    routes = list(_routes(app.routes))
    assert any(r.path == "/v1/chat/completions" for r in routes) and len(routes) > 20
    sync = sorted({f"{route.path}: {dep.call.__module__}.{dep.call.__qualname__}"
                   for route in routes for dep in _dependencies(route.dependant)
                   if dep.call is not None and not inspect.iscoroutinefunction(dep.call)
                   and not inspect.isasyncgenfunction(dep.call)})
    assert sync == []
