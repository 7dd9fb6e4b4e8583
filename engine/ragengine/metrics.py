"""Prometheus metrics for the whole engine, defined once, plus the ASGI middlewares that record requests
and cap request bodies.

Metrics live in their own ``REGISTRY`` (not the process-global default) so several apps in one test
process do not collide, and ``/metrics`` shows exactly the engine's series.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ragengine.errors import error_body_for

REGISTRY = CollectorRegistry(auto_describe=True)

_FAST = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

HTTP_REQUESTS = Counter(
    "ragengine_http_requests_total", "HTTP requests by method, route template and status.",
    ["method", "path", "status"], registry=REGISTRY,
)
HTTP_SECONDS = Histogram(
    "ragengine_http_request_seconds", "HTTP request latency until the response starts (headers sent).",
    ["method", "path"], buckets=(*_FAST, 30, 60, 120), registry=REGISTRY,
)
HTTP_IN_FLIGHT = Gauge("ragengine_http_requests_in_flight", "Requests being served.", registry=REGISTRY)

EMBED_SECONDS = Histogram(
    "ragengine_embed_seconds", "Time in the embedding model per call (kind=query|documents).",
    ["kind"], buckets=(*_FAST, 30, 60), registry=REGISTRY,
)
EMBEDDED_TEXTS = Counter("ragengine_embedded_texts_total", "Texts embedded.", ["kind"], registry=REGISTRY)
SEARCH_SECONDS = Histogram(
    "ragengine_search_seconds", "Index search time per stage (dense, sparse, fusion).",
    ["stage"], buckets=_FAST, registry=REGISTRY,
)
RERANK_SECONDS = Histogram("ragengine_rerank_seconds", "Cross-encoder rerank time.", buckets=_FAST, registry=REGISTRY)
RETRIEVE_SECONDS = Histogram(
    "ragengine_retrieve_seconds", "Whole retrieval (embed + search + fuse + rerank).", buckets=_FAST, registry=REGISTRY
)
RETRIEVED_CHUNKS = Histogram(
    "ragengine_retrieved_chunks", "Chunks one retrieval returned (0 = nothing matched).",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100, 300), registry=REGISTRY,
)
CONTEXT_CHUNKS = Histogram(
    "ragengine_context_chunks", "Retrieved chunks that went into a chat completion's prompt (0 = answered without "
    "context).", buckets=(0, 1, 2, 5, 10, 20, 50, 100, 300), registry=REGISTRY,
)
INGEST_SECONDS = Histogram(
    "ragengine_ingest_seconds", "One write request: chunk + embed + journal + apply.", buckets=_SLOW, registry=REGISTRY
)
EMBEDDING_BACKEND = Gauge(
    "ragengine_embedding_backend", "1 for the embedding backend in use (openvino, onnx, torch, remote).", ["backend"],
    registry=REGISTRY,
)
INDEX_DOCUMENTS = Gauge("ragengine_index_documents", "Documents per index.", ["index"], registry=REGISTRY)
INDEX_CHUNKS = Gauge("ragengine_index_chunks", "Chunks (vectors) per index.", ["index"], registry=REGISTRY)
INDEX_CORRUPT = Gauge("ragengine_index_corrupt", "1 when an index failed to load from disk.", ["index"], registry=REGISTRY)
_PER_INDEX = (INDEX_DOCUMENTS, INDEX_CHUNKS, INDEX_CORRUPT)


def forget_index(name: str) -> None:
    """Drop a deleted index's series (a gauge that was never set for it is fine)."""
    for gauge in _PER_INDEX:
        with contextlib.suppress(KeyError):
            gauge.remove(name)
# Evaluations (docs/evaluation.md). Scores: one series per index, version and metric, for the versions of
# each index's last two runs only (the live one and the one compared with it): a bounded label set.
EVALUATION_SCORE = Gauge("ragengine_evaluation_score", "Score of an index version on its golden set, last run.",
                         ["index", "version", "metric"], registry=REGISTRY)
EVALUATION_LAST_RUN = Gauge("ragengine_evaluation_last_run_timestamp_seconds",
                            "When the index's last evaluation run finished (Unix time).", ["index"], registry=REGISTRY)
EVALUATION_RUNS = Counter("ragengine_evaluation_runs_total", "Evaluation runs finished, by trigger and status.",
                          ["trigger", "status"], registry=REGISTRY)
EVALUATION_RUNNING = Gauge("ragengine_evaluation_runs_running", "Evaluation runs this replica scores now.",
                           registry=REGISTRY)
EVALUATION_SECONDS = Histogram("ragengine_evaluation_seconds", "Time to score one run.", buckets=_SLOW,
                               registry=REGISTRY)
EVALUATION_GATES = Counter("ragengine_evaluation_gates_total", "Gated re-indexes decided, by outcome.", ["outcome"],
                           registry=REGISTRY)


def set_evaluation_scores(latest: dict[str, list[tuple[int | None, dict, float | None]]],
                          shown: frozenset[tuple[str, ...]] = frozenset()) -> frozenset[tuple[str, ...]]:
    """Every index's newest runs (newest first: version, metrics, finished at) as the gauges, replacing the series
    set last time (``shown``, returned for the next call), so a version that no run names any more leaves no
    series behind. Only those: another engine in the same process (the tests run several) keeps its own."""
    now: set[tuple[str, ...]] = set()
    for index, runs in latest.items():
        for version, scores, _at in reversed(runs):  # the newest run wins a version both name
            for metric, value in scores.items():
                EVALUATION_SCORE.labels(index, str(version), metric).set(value)
                now.add(("score", index, str(version), metric))
        if runs and runs[0][2] is not None:
            EVALUATION_LAST_RUN.labels(index).set(runs[0][2])
            now.add(("last", index))
    for gone in shown - now:
        with contextlib.suppress(KeyError):
            (EVALUATION_SCORE if gone[0] == "score" else EVALUATION_LAST_RUN).remove(*gone[1:])
    return frozenset(now)


SNAPSHOT_SECONDS = Histogram("ragengine_snapshot_seconds", "Snapshot write time.", buckets=_SLOW, registry=REGISTRY)
# A FAISS pod's replacement (ragengine.handover): a stand-by until the old process gives the data folder up.
STANDBY = Gauge("ragengine_standby", "1 while this process is a stand-by: another engine process still holds its "
                "data folder; reads are served, other requests held.", registry=REGISTRY)
HANDOVER_SECONDS = Gauge("ragengine_handover_seconds", "The take-over: from this process's start as a stand-by until "
                         "it served writes (0: it never was one).", registry=REGISTRY)
HANDOVER_HELD = Counter("ragengine_handover_held_requests_total", "Requests a stand-by held for its take-over, by "
                        "outcome (served, timeout, stopping, cancelled).", ["outcome"], registry=REGISTRY)
HANDOVER_HELD_SECONDS = Histogram("ragengine_handover_held_seconds", "How long a held request waited for the "
                                  "take-over.", buckets=_SLOW, registry=REGISTRY)

# Time to first token: request received → first content token sent to the client (the whole answer
# when not streaming), and LLM request sent → first chunk back; their difference is the engine's overhead.
RAG_TTFT_SECONDS = Histogram(
    "rag_ttft_seconds", "Chat request received → first content token sent to the client, by answer mode "
    "(rag, passthrough, extractive).", ["mode"], buckets=_SLOW, registry=REGISTRY,
)
LLM_TTFT_SECONDS = Histogram(
    "llm_ttft_seconds", "LLM request sent → first token received from upstream, by LLM endpoint.",
    ["endpoint"], buckets=_SLOW, registry=REGISTRY,
)

# Every request to an LLM endpoint, by outcome: ok (2xx), 4xx, 5xx, timeout, connect_error, error; and the
# answers that did not come from the first endpoint tried: next_endpoint (a later one in the chain answered),
# extractive (every endpoint failed or refused: the extractive answer).
LLM_REQUESTS = Counter(
    "ragengine_llm_requests_total", "Requests to LLM endpoints by endpoint and outcome.", ["endpoint", "outcome"],
    registry=REGISTRY,
)
LLM_FALLBACKS = Counter("ragengine_llm_fallbacks_total", "Answers by a fallback, by kind (next_endpoint, extractive).",
                        ["kind"], registry=REGISTRY)

# The rag layer and conversations.
GROUNDEDNESS_SCORE = Histogram(
    "ragengine_groundedness_score", "Groundedness score of RAG answers in session messages (0 = unsupported).",
    ["mode"], buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), registry=REGISTRY,
)
UNGROUNDED_ANSWERS = Counter(
    "ragengine_ungrounded_answers_total", "Answers flagged as below the groundedness threshold.", ["mode"],
    registry=REGISTRY,
)
SESSION_MESSAGES = Counter(
    "ragengine_session_messages_total", "Session messages answered, by mode and generation method.",
    ["mode", "generation_method"], registry=REGISTRY,
)
REFORMULATIONS = Counter(
    "ragengine_reformulations_total", "Reformulation requests by outcome (rewritten, unchanged, skipped, failed).",
    ["outcome"], registry=REGISTRY,
)
REFORMULATE_SECONDS = Histogram(
    "ragengine_reformulate_seconds", "Time spent in the LLM rewriting a follow-up question.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY,
)
TOOL_CALLS = Counter("ragengine_tool_calls_total", "semantic_search tool calls executed (scoped).", registry=REGISTRY)
FILES_INGESTED = Counter(
    "ragengine_conversation_files_total", "Uploaded files by final ingestion status.", ["status"], registry=REGISTRY,
)
FILES_ACCEPTED = Counter("ragengine_conversation_files_accepted_total", "Uploaded files accepted into the ingestion "
                         "queue.", registry=REGISTRY)
INGESTION_RUNNING = Gauge("ragengine_ingestion_jobs_running", "Uploaded files this replica is ingesting now.",
                          registry=REGISTRY)
# Access control: principal labels are names from the engine's own configuration (bounded: a key's name, a
# configured ServiceAccount's namespace/name; a token of any other account is "unauthenticated"), plus
# "unauthenticated" and "anonymous" (access control off); kind is key, serviceaccount, anonymous or none;
# outcome is a fixed reason token (access.decide, access.enforce).
ACCESS_DECISIONS = Counter(
    "ragengine_access_decisions_total", "Access decisions by principal and outcome.", ["principal", "kind", "outcome"],
    registry=REGISTRY,
)
ACCESS_RELOADS = Counter(
    "ragengine_access_reloads_total", "Re-reads of the access file by outcome (ok, error).", ["outcome"],
    registry=REGISTRY,
)


PRIVATE_LABELS = frozenset({"index"})  # label values that name a tenant's data


class _PublicView:
    """``REGISTRY`` without the series whose labels name an index, for ``/metrics`` without the key."""

    def collect(self) -> Any:
        for family in REGISTRY.collect():
            family.samples = [s for s in family.samples if not PRIVATE_LABELS & s.labels.keys()]
            yield family


def public_view() -> Any:
    return _PublicView()


def _routes(routes: Any) -> Any:
    """Every route, through included routers (recent FastAPI keeps an included router as one route)."""
    for route in routes:
        if hasattr(route, "original_router"):
            yield from _routes(route.original_router.routes)
        elif getattr(route, "path", None):
            yield route


_MATCHED = "ragengine.route"  # where the match is kept in the scope: resolved once per request


def matched_route(scope: dict) -> tuple[Any, dict[str, Any]]:
    """The route of the app that fully matches ``scope`` and its path parameters, resolved as the router will
    resolve it (so a middleware can act on the route before the body is read); ``(None, {})`` when none does."""
    route = scope.get("route")
    if route is not None and getattr(route, "path", None):
        return route, dict(scope.get("path_params") or {})
    if _MATCHED in scope:
        return scope[_MATCHED]
    found: tuple[Any, dict[str, Any]] = (None, {})
    for candidate in _routes(getattr(scope.get("app"), "routes", ())):
        try:
            match, child = candidate.matches(scope)
        except Exception:
            continue
        if match.name == "FULL":
            found = (candidate, dict(child.get("path_params") or {}))
            break
    scope[_MATCHED] = found
    return found


def route_template(scope: dict) -> str:
    """The matched route's path template (``/indexes/{index_name}``) so labels stay low-cardinality."""
    route, _ = matched_route(scope)
    return route.path if route is not None else "<unmatched>"


_SERVING = [0]  # POSTs being served now (retrievals, answers, writes), evaluation routes apart (serving_in_flight)
_SERVED_AT = [0.0]  # when the last of them ended (time.monotonic)


def serving_in_flight() -> int:
    """Client requests this process is serving now: an evaluation yields to them (ragengine.evaluation.runner)."""
    return _SERVING[0]


def serving_quiet_for() -> float:
    """Seconds since the last client request ended (0 while one is in flight)."""
    return 0.0 if _SERVING[0] else time.monotonic() - _SERVED_AT[0]


class MetricsMiddleware:
    """Counts every HTTP request by method, route template and status; times it to the first byte."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def _send(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                HTTP_SECONDS.labels(scope["method"], route_template(scope)).observe(time.perf_counter() - start)
            await send(message)

        path = scope.get("path") or ""
        # The work an evaluation must not slow down: POSTs (reads of status and listings are cheap)
        serving = 1 if scope["method"] == "POST" and "/evaluations" not in path else 0
        HTTP_IN_FLIGHT.inc()
        _SERVING[0] += serving
        try:
            await self.app(scope, receive, _send)
        finally:
            _SERVING[0] -= serving
            if serving:
                _SERVED_AT[0] = time.monotonic()
            HTTP_IN_FLIGHT.dec()
            HTTP_REQUESTS.labels(scope["method"], route_template(scope), str(status["code"])).inc()


class _BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """413 for request bodies over the limit of the route they are sent to: by Content-Length up front, else
    while streaming. The limit is ``max_bytes`` but for the routes in ``route_bytes`` (``(METHOD, template)``:
    an index import, a whole export file, streamed), chosen by the route the request matches (never by a
    path's suffix: ``/v1/vector_stores/kb/files/import`` is a file update, not an import)."""

    def __init__(self, app: Callable, max_bytes: int, route_bytes: dict[tuple[str, str], int] | None = None) -> None:
        self.app = app
        self.default_bytes = max_bytes
        self.route_bytes = dict(route_bytes or {})

    def limit_for(self, scope: dict) -> int:
        route, _ = matched_route(scope)
        template = getattr(route, "path", None)
        return self.route_bytes.get((str(scope.get("method", "")).upper(), template or ""), self.default_bytes)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self._limited(scope, receive, send, self.limit_for(scope))

    async def _limited(self, scope: dict, receive: Callable, send: Callable, max_bytes: int) -> None:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await self._reject(scope, send, max_bytes)
                    return
        seen = 0
        state = {"started": False, "refused": False}

        async def _receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    # Answered here and now: FastAPI turns an exception while it reads a body into a 400, and
                    # whatever the app answers after this is dropped (``_send``).
                    if not state["started"] and not state["refused"]:
                        state["refused"] = True
                        await self._reject(scope, send, max_bytes)
                    raise _BodyTooLarge
            return message

        async def _send(message: dict) -> None:
            if state["refused"]:
                return
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, _receive, _send)
        except _BodyTooLarge:
            if not state["started"] and not state["refused"]:
                await self._reject(scope, send, max_bytes)

    async def _reject(self, scope: dict, send: Callable, max_bytes: int) -> None:
        message = f"Request body too large: the limit is {max_bytes} bytes."
        payload = json.dumps(error_body_for(scope.get("path", ""), 413, message, "invalid_request_error")).encode()
        await send({
            "type": "http.response.start", "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                        (b"connection", b"close")],
        })
        await send({"type": "http.response.body", "body": payload})


LARGE_BODY_ROUTES = (("POST", "/indexes/{index_name}/import"),)  # max_import_bytes; every other route max_body_bytes


def install_middleware(app: Any, settings: Any) -> None:
    """Add the body limit and request metrics middlewares to ``app`` (idempotent; call in create_app)."""
    if getattr(app.state, "_core_middleware", False):
        return
    routes = {route: getattr(settings, "max_import_bytes", settings.max_body_bytes) for route in LARGE_BODY_ROUTES}
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, route_bytes=routes)
    app.add_middleware(MetricsMiddleware)  # added last = outermost: it also counts the 413s
    app.state._core_middleware = True
