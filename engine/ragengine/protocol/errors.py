"""The engine's two error bodies, as published in ``/openapi.json``, and the statuses routes declare.

KAITO-compatible routes answer ``ErrorDetail``; the OpenAI-compatible ``/v1/`` routes answer
``OpenAIErrorResponse`` (what the official SDKs parse). ``errors.document_error_responses`` gives every
declared 4xx/5xx of every operation the right one of these schemas.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    """Error body of the KAITO-compatible routes (``/index``, ``/indexes/...``, ``/retrieve``, ...)."""

    detail: str = Field(description="What went wrong, for a person to read.")
    errors: list[dict[str, Any]] | None = Field(
        None, description="On 422 only: pydantic's validation errors (type, loc, msg, ...), one per bad field."
    )


class OpenAIError(BaseModel):
    message: str = Field(description="What went wrong, for a person to read.")
    type: str = Field(description="invalid_request_error, authentication_error, not_found_error, upstream_error, ...")
    code: int | str | None = Field(None, description="The HTTP status (or the upstream LLM's error code).")
    param: str | None = Field(None, description="The request field or parameter at fault, when there is one.")


class OpenAIErrorResponse(BaseModel):
    """Error body of the ``/v1/`` routes: OpenAI's ``{"error": {...}}``."""

    error: OpenAIError


ERROR_DESCRIPTIONS = {
    400: "Bad request: malformed JSON, an invalid value, a filter or name the engine refuses.",
    401: "Missing or wrong credentials (only when the engine runs with access control: an API key or an access file).",
    403: "The caller's role does not allow this (docs/access.md).",
    404: "Not found: the index, document, session, thread or file does not exist.",
    409: "Conflict: the index or document exists already, or the index could not be loaded from disk.",
    413: "Payload too large: the body, a document or an upload is above its limit.",
    415: "Unsupported media type: the uploaded file's type cannot be indexed.",
    422: "Validation failed: a field or parameter has the wrong type or is out of range (named in the message).",
    429: "Too many requests: the caller's rate limit (Retry-After says when; docs/access.md), or the LLM server "
         "refused the request for now (its status, passed through).",
    500: "The engine could not write to its data volume (journal or snapshot); nothing was acknowledged.",
    502: "The LLM or the remote embedding service failed or is unreachable.",
    503: "Unavailable: no LLM is configured for a request that needs one, the external vector store is "
         "unreachable, a ServiceAccount token cannot be verified now, or a FAISS engine that replaces another "
         "has not taken its data folder over in time (the body says which; Retry-After when it is worth a retry).",
    504: "The LLM or the remote embedding service timed out.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: the error statuses it sends beyond those of its request shape.

    The body schema is filled in for every route by ``errors.document_error_responses``, which also
    adds what follows from the request itself (400/413 for a body, 422 or 400 for validation, 401
    with an API key), so routes list only what their own logic answers.
    """
    return {status: {"description": ERROR_DESCRIPTIONS[status]} for status in statuses}
