"""Domain errors and their HTTP shape.

Domain code (index, retrieval, chat, conversations) raises these and never imports FastAPI. The
KAITO-compatible routes answer ``{"detail": message}``; the OpenAI-compatible ``/v1/`` routes answer
OpenAI's ``{"error": {"message", "type", "code", "param"}}`` so the official SDKs raise the right class.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragengine.settings import EngineSettings
from ragengine.validation import validation_message, validation_param

log = logging.getLogger(__name__)


class EngineError(Exception):
    status_code = 500
    error_type = "internal_error"

    def __init__(self, message: str, *, status_code: int | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers
        self.code = code  # OpenAI's error code where one applies (``invalid_file``); else the status is sent
        if status_code is not None:
            self.status_code = status_code


class BadRequest(EngineError):
    status_code = 400
    error_type = "invalid_request_error"


class Unauthorized(EngineError):
    status_code = 401
    error_type = "authentication_error"


class Forbidden(EngineError):
    """Authenticated, but the principal's role does not allow this (access.decide)."""

    status_code = 403
    error_type = "permission_error"


class NotFound(EngineError):
    status_code = 404
    error_type = "not_found_error"


class Conflict(EngineError):
    status_code = 409
    error_type = "conflict_error"


class PayloadTooLarge(EngineError):
    status_code = 413
    error_type = "invalid_request_error"


class UnsupportedMediaType(EngineError):
    status_code = 415
    error_type = "invalid_request_error"


class Unprocessable(EngineError):
    status_code = 422
    error_type = "invalid_request_error"


class RateLimited(EngineError):
    """The principal spent its requests or LLM tokens for the minute (access.limits); ``Retry-After`` says when."""

    status_code = 429
    error_type = "rate_limit_exceeded"


class UpstreamError(EngineError):
    """The LLM (or a remote embedder) failed; status is theirs (4xx kept) or 502/504."""

    status_code = 502
    error_type = "upstream_error"

    def fallback_reason(self) -> str:
        """Why an answer came without the LLM (a response's ``fallback_reason``): a refusal says so."""
        if self.status_code < 500:
            return f"The LLM refused the request (HTTP {self.status_code}): {self.message}"
        return self.message


class Unavailable(EngineError):
    """The engine cannot serve this request now (a stand-by that has not taken its data folder over yet);
    ``Retry-After`` says when to try again."""

    status_code = 503
    error_type = "service_unavailable"


class CorruptData(EngineError):
    """A file on disk failed its checksum or could not be parsed; it is never half-loaded."""

    status_code = 500
    error_type = "corrupt_data"


def openai_error(message: str, error_type: str, status: int, param: str | None = None,
                 code: str | None = None) -> dict:
    """OpenAI's error object ``{"error": {"message", "type", "code", "param"}}``: the one place it is built.

    Used for ``/v1/`` responses, 401/413 answered by middleware and ``error`` events of streams, so the
    official SDKs raise the right exception class whichever layer refused the request.
    """
    return {"error": {"message": message, "type": error_type, "code": code or status, "param": param}}


# OpenAI-compatible routes that KAITO's clients call too: their error bodies carry both shapes.
KAITO_COMPATIBLE_V1 = frozenset({"/v1/chat/completions"})


def error_body_for(path: str, status: int, message: str, error_type: str, param: str | None = None,
                   code: str | None = None) -> dict:
    """The error body a route answers: OpenAI's shape under ``/v1/`` (plus KAITO's ``detail`` on the
    KAITO-compatible routes, so clients written for either read the message), ``{"detail"}`` elsewhere."""
    if path.startswith("/v1/"):
        body = openai_error(message, error_type, status, param, code)
        if path in KAITO_COMPATIBLE_V1:
            body["detail"] = message
        return body
    return {"detail": message}


def error_body(request: Request, status: int, message: str, error_type: str, param: str | None = None,
               code: str | None = None) -> dict:
    return error_body_for(request.url.path, status, message, error_type, param, code)


def install_error_handlers(app: FastAPI, settings: EngineSettings) -> None:
    @app.exception_handler(EngineError)
    async def _engine_error(request: Request, exc: EngineError) -> JSONResponse:
        if exc.status_code >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
        body = error_body(request, exc.status_code, exc.message, exc.error_type, exc.param, exc.code)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Malformed JSON and schema violations are the client's fault: a 4xx naming the field.
        errors = exc.errors()
        message = validation_message(exc) or "Invalid request."
        status = 400 if request.url.path.startswith("/v1/") else 422
        bad_json = next((err for err in errors if err.get("type") == "json_invalid"), None)
        if bad_json is not None:
            reason = (bad_json.get("ctx") or {}).get("error") or bad_json.get("msg")
            status, message = 400, f"Malformed JSON body: {reason}"
        if request.url.path.startswith("/v1/"):
            body = error_body(request, status, message, "invalid_request_error", validation_param(exc))
            return JSONResponse(body, status_code=status)
        return JSONResponse({"detail": message, "errors": _jsonable(errors)}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = error_body(request, exc.status_code, str(exc.detail), "invalid_request_error")
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


def _jsonable(errors: Sequence[Any]) -> list[dict]:
    return [{k: (v if isinstance(v, (str, int, float, list, type(None))) else str(v)) for k, v in e.items()} for e in errors]
