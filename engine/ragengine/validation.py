"""Pydantic's validation errors as the one line users read: ``where: what``, joined by ``; ``.

Every route and reader that reports a pydantic error builds its message here: the engine's (``errors``
re-exports both functions for its routes) and the operator's (a RAGEngine's spec, its access rules). No
FastAPI here, so the operator imports it without the engine's web stack. FastAPI's ``RequestValidationError``
is read by its shape: anything with ``errors()`` that is not pydantic's own ``ValidationError`` is a request's,
whose locations start with where the value was found (``body``, ``query``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import ValidationError

_SOURCES = ("body", "query", "path", "header", "cookie")  # where FastAPI found a value: the first part of its loc


class Errors(Protocol):
    """Pydantic's ``ValidationError`` or FastAPI's ``RequestValidationError``."""

    def errors(self) -> Sequence[Any]: ...


def validation_message(errors: Errors, *, within: str = "", limit: int | None = 5) -> str:
    """Pydantic's (or FastAPI's) validation errors as one line: ``where: what`` for each of the first ``limit``
    (None: every one), joined by ``; ``. ``where`` is the field's path (FastAPI's leading ``body`` left out),
    under ``within`` when the value validated sits inside a larger request (``tools[0]``) or object (``spec``);
    a bare ``what`` where there is no path. Never the value itself: it is the caller's data."""
    parts = []
    for err in list(errors.errors())[:limit]:
        where = _path(within, _loc(errors, err, ("body",)))
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "; ".join(parts)


def validation_param(errors: Errors, *, within: str = "") -> str | None:
    """The field or parameter the first validation error names (OpenAI's ``param``), if any."""
    for err in errors.errors():
        if loc := _loc(errors, err, _SOURCES):
            return _path(within, loc)
    return None


def _loc(errors: Errors, err: Any, sources: tuple[str, ...]) -> tuple:
    """The error's location, less a request's leading part when it is one of ``sources`` (a model's own
    field named ``query`` stays)."""
    loc = tuple(err.get("loc", ()))
    return loc[1:] if not isinstance(errors, ValidationError) and loc and loc[0] in sources else loc


def _path(within: str, loc: tuple) -> str:
    return ".".join(map(str, (within, *loc) if within else loc))
