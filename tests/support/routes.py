"""The engine's route table, from the app ``create_app`` builds: what tests iterate to cover every route."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fastapi.routing import APIRoute


def api_routes(routes: Iterable) -> Iterator[APIRoute]:
    """Every ``APIRoute`` of an app, through included routers (recent FastAPI keeps them as one route each).

    The engine includes its routers without a prefix, so a route's own ``path`` is its URL.
    """
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from api_routes(route.original_router.routes)


def operations(app) -> set[tuple[str, str]]:
    """``(method, path)`` of every operation of ``app``, methods lower case (HEAD, OPTIONS left out)."""
    return {(m.lower(), r.path) for r in api_routes(app.routes) for m in r.methods if m not in ("HEAD", "OPTIONS")}
