"""A FAISS engine replaced without a gap: the new process serves beside the old one, then takes over.

One process writes a data folder at a time (index/writer_lock.py). A pod's replacement starts beside the
old one on the same volume (the operator's RollingUpdate with maxSurge 1, and a podAffinity that keeps it
on the volume's node) and finds the folder locked. Rather than serve nothing until the old process is
gone, it starts as a stand-by: it loads the folder read-only (snapshots and journals as they stand, writing
nothing), answers the probes and the routes that only read the indexes at once
(``access.routes.served_by_standby``), and holds every other request in ``hold``. Being ready, it lets the
rolling update go on: the old pod is stopped (preStop sleep, drain, final snapshot, lock given up). A
background task waits for the lock to be free, then runs the normal start (``ragengine.services``: restore
from disk, which now holds the old process's final snapshot) on a state of its own, which replaces the
app's in one step; the held requests then go on, to the writer's services. A stand-by's embedder, LLM
client and output policy are kept. A request held past ``handover_wait_seconds`` gets 503 with
Retry-After, as does every held request once the process is told to stop before it took over.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import tempfile
import time
from contextlib import AsyncExitStack
from typing import Any

from fastapi import FastAPI, Request
from sqlalchemy import create_engine
from starlette.datastructures import State

from ragengine import metrics, services
from ragengine.access.limits import UsageCounter
from ragengine.access.routes import Rule, rule_for, served_by_standby
from ragengine.api import chat as chat_api
from ragengine.api import indexes as indexes_api
from ragengine.conversations.models import UsageRow
from ragengine.errors import Unavailable
from ragengine.index.disk import index_root
from ragengine.index.writer_lock import WriterLock
from ragengine.settings import EngineSettings

log = logging.getLogger(__name__)
# Imported on first use, by the writer's start (the sessions' migrations) and by the first write (the text
# splitters): seconds each on a busy machine. A stand-by imports them while it waits, not in the hand-over.
WARM_IMPORTS = ("alembic.command", "llama_index.core.node_parser",
                "mcp.server.streamable_http_manager", "ragengine.mcp.server")  # /mcp's SDK: a second or two
POLL_S = 0.05  # how often a stand-by looks at the lock: the old process's last write to the take-over
CHECK_S = 0.5  # how often a held request looks whether the process is stopping
REPORT_S = 10.0  # a log line this often while the old process holds the folder


async def start(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    """The engine's services: at once when no other process holds the data folder (or the store is not
    FAISS, or ``handover_standby`` is off: the registry's start then waits for the folder), else a stand-by."""
    lock = WriterLock(index_root(settings.data_dir))
    if settings.vector_store != "faiss" or not settings.handover_standby or not lock.busy():
        await services.start(app, settings, stack)
        return
    log.warning("another engine process (%s) holds %s: serving reads from a read-only load of the folder, and "
                "holding writes up to %g s, until it has stopped", lock.holder(), lock.path,
                settings.handover_wait_seconds)
    handover = Handover(settings, app.state.drain, lock)
    await indexes_api.startup(app, settings, stack, read_only=True)  # the embedder and reranker are kept
    await chat_api.startup(app, settings, stack)  # so are the LLM client and the output policy
    app.state.usage = own_usage(stack)
    app.state.access.index_names = app.state.registry.names
    app.state.handover = handover
    metrics.STANDBY.set(1)
    handover.begin(app)
    stack.push_async_callback(handover.close)  # first at shutdown: the writer's services, then the rest


async def hold(request: Request) -> None:
    """The first dependency of every route: in a stand-by, a route it does not serve waits for the take-over."""
    handover: Handover | None = getattr(request.app.state, "handover", None)
    if handover is None or handover.writer:
        return
    method = "GET" if request.method == "HEAD" else request.method
    if handover.holds(method, rule_for(method, request.scope["route"].path)):
        await handover.wait()


def own_usage(stack: AsyncExitStack) -> UsageCounter:
    """Rate limits counted in a database of the stand-by's own (a file in the temporary folder, not on the
    volume): it opens no sessions' database, and a principal's limits still hold for what it serves."""
    fd, path = tempfile.mkstemp(prefix="ragengine-standby-usage-", suffix=".db")
    os.close(fd)
    stack.callback(os.unlink, path)
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 30})
    stack.callback(engine.dispose)
    UsageRow.__table__.create(engine)  # type: ignore[attr-defined]  # a Table, typed FromClause
    return UsageCounter(engine, UsageRow.__table__)  # type: ignore[arg-type]


def warm_imports() -> None:
    for name in WARM_IMPORTS:
        importlib.import_module(name)


class Handover:
    """A stand-by's wait for its data folder, the take-over, and the requests held meanwhile."""

    def __init__(self, settings: EngineSettings, drain: Any, lock: WriterLock) -> None:
        self.settings = settings
        self.drain = drain  # shutdown.Drain: SIGTERM before the take-over ends the wait
        self.lock = lock
        self.since = time.monotonic()
        self.failure: str | None = None
        self.held = 0  # requests held so far
        self.longest_s = 0.0  # the longest any of them waited
        self._writer = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._warm: asyncio.Task | None = None
        self._held_since: list[float] = []  # when each request held now came in
        self._stack = AsyncExitStack()  # the writer's services

    @property
    def writer(self) -> bool:
        return self._writer.is_set()

    def holds(self, method: str, rule: Rule) -> bool:
        """Whether a request of this route waits for the take-over (``hold``); access control's gate asks too,
        and leaves what needs the writer's services to after the wait."""
        return not self.writer and not served_by_standby(method, rule)

    @property
    def waiting(self) -> int:
        """Requests held now."""
        return len(self._held_since)

    def report(self) -> dict[str, Any] | None:
        """What ``/health`` shows while this process is a stand-by (None once it took over)."""
        if self.writer:
            return None
        return {"role": "standby", "seconds": round(time.monotonic() - self.since, 1), "held_requests": self.waiting,
                "failure": self.failure}

    def begin(self, app: FastAPI) -> None:
        self._task = asyncio.create_task(self._take_over(app), name="handover")

    async def _take_over(self, app: FastAPI) -> None:
        self._warm = asyncio.create_task(asyncio.to_thread(warm_imports), name="warm-imports")
        try:
            await self._wait_for_folder()
            freed = time.monotonic()
            # The startups fill a state of their own (a FastAPI object only carries it), seeded with the app's:
            # settings, access, drain, the stand-by's embedder, LLM client and policy, kept as they are.
            staging = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
            staging.state = State(dict(app.state._state))
            await services.start(staging, self.settings, self._stack)
        except Exception as exc:
            self.failure = str(exc)
            log.error("the stand-by could not take its data folder over, stopping: %s", exc)
            await self._stack.aclose()
            self.drain.start(time.monotonic())  # the server stops as on SIGTERM; `ragengine serve` exits with an error
            return
        app.state = staging.state  # one step: every request from now on sees the writer's services
        self._writer.set()
        metrics.STANDBY.set(0)
        now = time.monotonic()
        metrics.HANDOVER_SECONDS.set(now - self.since)
        longest = max([self.longest_s, *(now - t for t in self._held_since)])
        log.warning("took the data folder over %.1f s after starting as a stand-by (%.1f s after the other process "
                    "let go: loading it); %d requests were held, the longest %.1f s", now - self.since, now - freed,
                    self.held, longest)

    async def _wait_for_folder(self) -> None:
        """Until no other process holds the lock (the registry's start then takes it), within the lock's timeout."""
        timeout_s = self.settings.writer_lock_timeout_seconds
        next_report = self.since + REPORT_S
        while self.lock.busy():
            now = time.monotonic()
            if now - self.since >= timeout_s:
                raise TimeoutError(f"another engine process ({self.lock.holder()}) still holds {self.lock.path} after "
                                   f"{now - self.since:.0f} s: two engines must never write one data folder; stop it, "
                                   "or raise writer_lock_timeout_seconds")
            if now >= next_report:
                log.warning("stand-by for %.0f s: the engine process that holds %s (%s) has not stopped; %d requests "
                            "held", now - self.since, self.lock.path, self.lock.holder(), self.waiting)
                next_report += REPORT_S
            await asyncio.sleep(POLL_S)

    async def wait(self) -> None:
        """Hold a request until the take-over; 503 with Retry-After past ``handover_wait_seconds``, or at once
        when the process stops (or failed to take over) first: the request did not run."""
        start = time.monotonic()
        bound = self.settings.handover_wait_seconds
        outcome = "cancelled"  # the client gave up first
        self.held += 1
        self._held_since.append(start)
        try:
            while not self.writer:
                if self.failure is not None or self.drain.active:
                    outcome = "stopping"
                    raise Unavailable("This engine is stopping before it took its data folder over from the engine "
                                      "process it replaces; the request was not run. Retry: another engine serves it.",
                                      headers={"Retry-After": "1"})
                left = start + bound - time.monotonic()
                if left <= 0:
                    outcome = "timeout"
                    raise Unavailable(f"This engine is taking its data folder over from the engine process it "
                                      f"replaces, which has not stopped within {bound:g} s (handover_wait_seconds); "
                                      "the request was not run. Retry in a few seconds.", headers={"Retry-After": "5"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._writer.wait(), min(left, CHECK_S))
            outcome = "served"
        finally:
            waited = time.monotonic() - start
            self._held_since.remove(start)
            self.longest_s = max(self.longest_s, waited)
            metrics.HANDOVER_HELD.labels(outcome).inc()
            metrics.HANDOVER_HELD_SECONDS.observe(waited)

    async def close(self) -> None:
        """At shutdown: stop waiting for the folder, then stop the writer's services (final snapshot, lock given up)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._stack.aclose()
