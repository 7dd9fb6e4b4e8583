"""Where one chat turn's time goes, stage by stage: timers wrapped around the functions of the real request
path (middlewares, dependencies, handler, chat service, retrieval, LLM client), installed into an engine
process before its app is built (``turn_server.py``), one client at a time.

Each wrapper adds its wall time to the current request's record under its stage name (inclusive: a stage's
time includes the stages it calls). One client at a time, so the record is a process-wide variable: the
search threads (BM25, FAISS, fusion) write into the same record as the event loop. ``STAGES`` names what
is wrapped; ``report.rows`` turns the records into the table (exclusive times where stages nest).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import time
from collections import defaultdict
from typing import Any

CURRENT: dict[str, float] | None = None  # the record of the request being served (one client at a time)
RECORDS: list[dict[str, float]] = []
CALLS: dict[str, int] = defaultdict(int)
PROFILER: Any = None  # a cProfile.Profile of the event loop's thread during the recorded requests, when asked

# (stage, "module:attribute" or "module:Class.method"). The middlewares' __call__ are inclusive of every
# layer inside them; the report subtracts the next layer to show each one's own time.
STAGES: list[tuple[str, str]] = [
    ("mw.drain", "ragengine.shutdown:CloseWhileDraining.__call__"),
    ("mw.request_context", "ragengine.observability.requests:RequestContextMiddleware.__call__"),
    ("mw.metrics", "ragengine.metrics:MetricsMiddleware.__call__"),
    ("mw.body_limit", "ragengine.metrics:BodyLimitMiddleware.__call__"),
    ("mw.authentication", "ragengine.access.enforce:AuthenticationMiddleware.__call__"),
    ("mw.exceptions", "starlette.middleware.exceptions:ExceptionMiddleware.__call__"),
    ("dep.check_names", "ragengine.api.names:check_names"),
    ("dep.hold", "ragengine.handover:hold"),
    ("dep.authorize", "ragengine.app:authorize"),
    ("read_json", "ragengine.api.chat:read_json"),
    ("chat.create", "ragengine.chat.service:ChatService.create"),
    ("guardrails.for_answer", "ragengine.guardrails.runtime:Guardrails.for_answer"),
    ("parse_request", "ragengine.chat.service:parse_request"),
    ("plan.resolve_target", "ragengine.chat.service:resolve_target"),
    ("plan.bypass_reason", "ragengine.chat.service:bypass_reason"),
    ("plan.split_messages", "ragengine.chat.service:split_messages"),
    ("reformulation", "ragengine.chat.service:ChatService._query"),
    ("budget_and_retrieve", "ragengine.chat.service:ChatService._budget_and_retrieve"),
    ("llm.context_window", "ragengine.llm.client:LLMClient.context_window"),
    ("tokens.count", "ragengine.llm.client:LLMClient.count_tokens"),
    ("tokens.remote", "ragengine.llm.tokens:TokenCounter._ask"),
    ("retrieve", "ragengine.chat.service:ChatService._retrieve"),
    ("retrieval.embedding", "ragengine.retrieval.long_query:query_vector"),
    ("retrieval.bm25", "ragengine.index.search:_bm25"),
    ("retrieval.dense", "ragengine.index.store:VectorStore.search"),
    ("retrieval.fusion", "ragengine.index.search:_fuse"),
    ("screening", "ragengine.chat.service:screen_nodes"),
    ("select", "ragengine.chat.service:ChatService._select"),
    ("select.chunk_counts", "ragengine.llm.client:LLMClient.count_chunk_tokens"),
    ("select.greedy", "ragengine.chat.service:select_context"),
    ("prompt", "ragengine.chat.service:ChatService._rag_payload"),
    ("generate", "ragengine.chat.service:ChatService._generate"),
    ("llm.chat", "ragengine.llm.client:LLMClient.chat"),
    ("metrics.json", "ragengine.chat.service:ChatService._json"),
    ("guardrails.output", "ragengine.chat.service:guard_chat"),
    ("response.render", "ragengine.api.chat:JSONResponse.__init__"),
]


def _add(stage: str, seconds: float) -> None:
    record = CURRENT
    if record is not None:
        record[stage] = record.get(stage, 0.0) + seconds
        CALLS[stage] += 1


def timed(stage: str, fn: Any) -> Any:
    """``fn`` with its wall time added to the current record under ``stage`` (sync, async or async generator)."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                _add(stage, time.perf_counter() - start)
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(stage, time.perf_counter() - start)
    return wrapper


def install() -> list[str]:
    """Wrap every stage of ``STAGES`` that exists in this version of the engine; returns those missing."""
    missing = []
    for stage, target in STAGES:
        module_name, _, path = target.partition(":")
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            missing.append(stage)
            continue
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent, None)
        original = getattr(owner, attribute, None) if owner is not None else None
        if original is None:
            missing.append(stage)
            continue
        setattr(owner, attribute, timed(stage, original))
    return missing


class Recorder:
    """The outermost ASGI layer: one record per POST to ``path`` (its wall and process CPU time);
    ``on_shutdown`` runs when the app has shut down (uvicorn ends the process by re-raising SIGTERM, so
    ``atexit`` would not)."""

    def __init__(self, app: Any, path: str = "/v1/chat/completions", on_shutdown: Any = None) -> None:
        self.app = app
        self.path = path
        self.on_shutdown = on_shutdown

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        global CURRENT
        if scope.get("type") == "lifespan" and self.on_shutdown is not None:
            async def _send(message: dict) -> None:
                if message.get("type") == "lifespan.shutdown.complete":
                    self.on_shutdown()
                await send(message)
            await self.app(scope, receive, _send)
            return
        if scope.get("type") != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        record: dict[str, float] = {}
        CURRENT = record
        if PROFILER is not None:
            PROFILER.enable()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            await self.app(scope, receive, send)
        finally:
            record["asgi"] = time.perf_counter() - start
            record["cpu"] = time.process_time() - cpu
            if PROFILER is not None:
                PROFILER.disable()
            CURRENT = None
            RECORDS.append(record)
