"""The engine's route table, from the app ``create_app`` builds: what tests iterate to cover every route."""

from __future__ import annotations

from ragengine.app import api_routes


def operations(app, *, documented: bool = False) -> set[tuple[str, str]]:
    """``(method, path)`` of every operation of ``app``, methods lower case (HEAD, OPTIONS left out);
    ``documented``: only those in the OpenAPI document (``/mcp``, JSON-RPC over HTTP, is not)."""
    return {(m.lower(), r.path) for r in api_routes(app.routes) for m in r.methods
            if m not in ("HEAD", "OPTIONS") and (r.include_in_schema or not documented)}
