"""The engine's route table, from the app ``create_app`` builds: what tests iterate to cover every route."""

from __future__ import annotations

from ragengine.app import api_routes


def operations(app) -> set[tuple[str, str]]:
    """``(method, path)`` of every operation of ``app``, methods lower case (HEAD, OPTIONS left out)."""
    return {(m.lower(), r.path) for r in api_routes(app.routes) for m in r.methods if m not in ("HEAD", "OPTIONS")}
