"""``/openapi.json`` that says what the engine really answers, errors included, and how its operations link.

FastAPI documents a route's success response and, for routes with parameters, a 422 with its own
``HTTPValidationError`` body. The engine answers differently (see ``errors.py``): ``{"detail": str}``
on the KAITO routes, OpenAI's ``{"error": {...}}`` under ``/v1/`` (where validation errors are 400),
a 413 from the body limit and a 401 (or 503) from access control, both answered by middleware, a 403
when a principal's role is below the route's, a 404 for an index (or a session, upload, ...) the principal may
not see, worded as a missing one, and a 429 over a principal's rate limit. Clients generated
from the spec, and the Schemathesis contract test, rely on every status and body being declared.

OpenAPI links (``add_links``) say which operations act on what a ``POST`` created: the resource routes under
its path take the created ``id`` (``POST /v1/sessions`` → ``GET /v1/sessions/{session_id}``, ...), and every
route of an index takes the name a creating route was given (``POST /index``'s ``index_name``). Derived from
the paths and the access table, so a route added tomorrow is linked too; the fuzzer's stateful phase walks them.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI

from ragengine.access.routes import ROUTES, IndexFrom, Rule, is_open, rule_for, served_by_standby
from ragengine.protocol.errors import ERROR_DESCRIPTIONS, ErrorDetail, OpenAIErrorResponse

METHODS = ("get", "put", "post", "delete", "patch")


OPS_PATHS = ("/health", "/ready", "/metrics")


# Where a route's rule takes an index the caller may not see from: with access control on, such an index is
# a 404, worded as a missing one (access/decide.py), on every route but those that create it (403 there).
HIDING = frozenset({IndexFrom.path, IndexFrom.body, IndexFrom.chat, IndexFrom.store, IndexFrom.tools})


def hides(rule: Rule) -> bool:
    """Whether access control may answer 404 on a route: an index hidden from the caller, or a session, upload,
    stored response or evaluation run that is not theirs (``owned``)."""
    return not rule.open and (rule.owned or (rule.index in HIDING and not rule.creates))


def declared_statuses(path: str, operation: dict[str, Any], *, auth: bool, external_store: bool = False,
                      held: bool = False, hidden: bool = False) -> set[int]:
    """Error statuses an operation can answer: its own (``responses=``) plus what its request shape implies.
    ``held``: a FAISS stand-by holds it until it takes its data folder over (ragengine.handover), 503 past
    ``handover_wait_seconds``. ``hidden``: access control answers 404 for what the caller may not see
    (``hides``)."""
    responses = operation.get("responses", {})
    statuses = {int(s) for s in responses if str(s).isdigit() and int(s) >= 400}
    if _is_fastapi_validation_error(responses.get("422")):
        statuses.discard(422)  # FastAPI's default; re-added below where the engine really answers 422
    has_body = "requestBody" in operation
    if has_body:
        statuses |= {400, 413}  # malformed JSON; the body limit
    if has_body or operation.get("parameters"):
        statuses.add(400 if path.startswith("/v1/") else 422)
    if "{" in path:
        statuses.add(400)  # a name or id in the path that its rule refuses (api/names.py)
    if auth and not is_open(path):
        # no or bad credentials; a role below the route's (access/routes.py); a rate limit; a ServiceAccount
        # token that cannot be reviewed now (access/enforce.py)
        statuses |= {401, 403, 429, 503}
        if hidden:
            statuses.add(404)
    if external_store and not is_open(path):  # the probes report the store's state; the console's files are files
        statuses.add(503)  # the PostgreSQL / Milvus store is unreachable (the body names the reason)
    if held:
        statuses.add(503)
    return statuses


def _is_fastapi_validation_error(response: dict[str, Any] | None) -> bool:
    schema = ((response or {}).get("content") or {}).get("application/json", {}).get("schema", {})
    return schema.get("$ref", "").endswith("/HTTPValidationError")


def error_schema_for(path: str) -> str:
    return "OpenAIErrorResponse" if path.startswith("/v1/") else "ErrorDetail"


def add_error_responses(spec: dict[str, Any], *, auth: bool, external_store: bool = False,
                        standby: bool = False) -> dict[str, Any]:
    """Rewrite ``spec`` in place: every operation declares each error status it answers, with its body."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in (ErrorDetail, OpenAIErrorResponse):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            rule = rule_for(method, path)
            held = standby and not served_by_standby(method.upper(), rule)
            statuses = declared_statuses(path, operation, auth=auth, external_store=external_store, held=held,
                                         hidden=hides(rule))
            responses = operation.setdefault("responses", {})
            if _is_fastapi_validation_error(responses.get("422")):
                del responses["422"]
            for status in sorted(statuses):
                entry = responses.setdefault(str(status), {})
                entry.setdefault("description", ERROR_DESCRIPTIONS.get(status, "Error."))
                entry["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{error_schema_for(path)}"}}}
    # FastAPI's own validation-error schemas are no longer referenced by any operation.
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return spec


def _params(path: str) -> list[str]:
    return re.findall(r"{([^}]+)}", path)


def _link(spec: dict[str, Any], method: str, path: str, name: str, target: dict[str, Any], exprs: dict[str, str]) -> None:
    responses = spec["paths"][path][method]["responses"]
    ok = next((s for s in sorted(responses) if s.startswith("2")), None)
    if ok is None or not target.get("operationId"):
        return
    links = responses[ok].setdefault("links", {})
    links[re.sub(r"[^A-Za-z0-9._-]", "_", name)] = {"operationId": target["operationId"], "parameters": exprs}


def add_links(spec: dict[str, Any]) -> dict[str, Any]:
    """Rewrite ``spec`` in place: each creating ``POST`` links to the operations on what it created."""
    ops = [(m, p, op) for p, item in spec.get("paths", {}).items() for m, op in item.items() if m in METHODS]
    for method, path, _op in ops:
        if method != "post":
            continue
        own = _params(path)
        rule = ROUTES.get(("POST", path))
        named = None
        if rule is not None and rule.creates:  # the index it creates, by the name the request gave (JSON or path)
            named = {IndexFrom.body: "$request.body#/index_name", IndexFrom.path: "$request.path.index_name"}.get(
                rule.index)
        for m2, p2, op2 in ops:
            if (m2, p2) == (method, path):
                continue
            theirs = _params(p2)
            if p2.startswith(path + "/{") and theirs[: len(own)] == own and len(theirs) > len(own):
                exprs = {p: f"$request.path.{p}" for p in own}
                exprs[theirs[len(own)]] = "$response.body#/id"  # the created resource's id
                _link(spec, method, path, f"{m2}_{op2.get('operationId', p2)}", op2, exprs)
            elif named is not None and "index_name" in theirs and not p2.startswith(path + "/{"):
                _link(spec, method, path, f"{m2}_{op2.get('operationId', p2)}", op2, {"index_name": named})
    return spec


def document_error_responses(app: FastAPI, *, auth: bool, external_store: bool = False, standby: bool = False) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json``) publish the engine's real error responses."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(add_error_responses(generate(), auth=auth, external_store=external_store,
                                                               standby=standby))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
