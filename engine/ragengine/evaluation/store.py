"""Evaluation runs in the session store's database (SQLite, or PostgreSQL shared by replicas; migration
0005): nothing is lost on a restart, and every replica answers for every run.

A run is claimed by the replica that runs it (``runner``) and beats while it runs (``heartbeat_at``); a
run whose heartbeat is older than ``STALE_S`` was cut off by a restart or a crash, and is marked
``interrupted`` (by whichever replica looks first), never left ``running`` for ever. The newest ``keep``
runs of an index are kept; older ones are deleted when a run is created.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from ragengine.conversations.models import EvaluationRow, GoldenSetRow, utcnow
from ragengine.errors import NotFound

T = TypeVar("T")
QUEUED, RUNNING, SUCCEEDED, FAILED, INTERRUPTED = "queued", "running", "succeeded", "failed", "interrupted"
ACTIVE = (QUEUED, RUNNING)
STALE_S = 60.0  # a running run whose replica has not beaten for this long is taken as cut off


@dataclass(frozen=True)
class Run:
    id: str
    index: str
    version: int | None
    status: str
    trigger: str
    owner: str | None
    acl: list[str] | None
    fingerprint: str
    settings: dict
    questions: list[dict]
    done: int
    total: int
    metrics: dict | None
    results: dict | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "index": self.index, "status": self.status, "version": self.version,
                "trigger": self.trigger, "progress": {"done": self.done, "total": self.total},
                "metrics": self.metrics, "created_at": _iso(self.created_at), "started_at": _iso(self.started_at),
                "finished_at": _iso(self.finished_at), "error": self.error}

    def full(self) -> dict[str, Any]:
        results = self.results or {}
        return {**self.summary(), "settings": self.settings, "missing_doc_ids": results.get("missing"),
                "answer_metrics": results.get("answers"), "results": results.get("items")}


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat(timespec="seconds") + "Z"


def _run(row: EvaluationRow) -> Run:
    return Run(row.id, row.index_name, row.version, row.status, row.trigger, row.owner,
               (row.acl or {}).get("tokens") if row.acl is not None else None, row.fingerprint,
               dict(row.settings or {}), list((row.questions or {}).get("items", [])), row.done or 0, row.total or 0,
               row.metrics, row.results, row.error, row.created_at, row.started_at, row.finished_at)


# The columns of a listing: everything but the set, the settings and the results (the large ones).
_SMALL = (EvaluationRow.id, EvaluationRow.index_name, EvaluationRow.version, EvaluationRow.status,
          EvaluationRow.trigger, EvaluationRow.owner, EvaluationRow.done, EvaluationRow.total, EvaluationRow.metrics,
          EvaluationRow.error, EvaluationRow.created_at, EvaluationRow.started_at, EvaluationRow.finished_at)


def _light(r: Any) -> Run:
    return Run(r.id, r.index_name, r.version, r.status, r.trigger, r.owner, None, "", {}, [], r.done or 0,
               r.total or 0, r.metrics, None, r.error, r.created_at, r.started_at, r.finished_at)


def missing(run_id: str) -> NotFound:
    return NotFound(f"No such evaluation: '{run_id}'.", param="evaluation_id")


class EvaluationStore:
    def __init__(self, engine: Any, *, keep: int) -> None:
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self.keep = keep
        # Its own two threads: a slow database never holds the threads that sessions or serving use (issue 22).
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="evaluations")

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    async def _do(self, fn: Callable[[Session], T]) -> T:
        def work() -> T:
            with self._sessions.begin() as s:
                return fn(s)
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def create(self, *, index: str, version: int | None, trigger: str, owner: str | None,
                     acl: list[str] | None, fingerprint: str, settings: dict, questions: list[dict],
                     runner: str, run_id: str) -> Run:
        def fn(s: Session) -> Run:
            now = utcnow()
            row = EvaluationRow(id=run_id, index_name=index, version=version, status=QUEUED,
                                trigger=trigger, owner=owner, acl=None if acl is None else {"tokens": acl},
                                fingerprint=fingerprint, settings=settings, questions={"items": questions},
                                done=0, total=len(questions), created_at=now, runner=runner, heartbeat_at=now)
            s.add(row)
            s.flush()
            old = s.scalars(select(EvaluationRow.id).where(EvaluationRow.index_name == index)
                            .order_by(EvaluationRow.created_at.desc(), EvaluationRow.id).offset(self.keep)).all()
            if old:
                s.execute(delete(EvaluationRow).where(EvaluationRow.id.in_(old)))
            return _run(row)
        return await self._do(fn)

    async def get(self, run_id: str, index: str | None = None, owner: str | None = None) -> Run:
        """The run; ``owner`` set: only that principal's (anyone else gets the 404 of a missing run)."""
        def fn(s: Session) -> Run:
            row = s.get(EvaluationRow, run_id)
            if row is None or (index is not None and row.index_name != index) or (
                    owner is not None and row.owner != owner):
                raise missing(run_id)
            return _run(row)
        return await self._do(fn)

    async def owner_of(self, run_id: str) -> tuple[bool, str | None]:
        def fn(s: Session) -> tuple[bool, str | None]:
            row = s.get(EvaluationRow, run_id)
            return (row is not None, row.owner if row is not None else None)
        return await self._do(fn)

    async def runs(self, index: str, owner: str | None, limit: int) -> list[Run]:
        """The index's runs, newest first, without their questions and results (a listing)."""
        def fn(s: Session) -> list[Run]:
            q = select(*_SMALL).where(EvaluationRow.index_name == index)
            if owner is not None:
                q = q.where(EvaluationRow.owner == owner)
            return [_light(r) for r in s.execute(q.order_by(EvaluationRow.created_at.desc()).limit(limit))]
        return await self._do(fn)

    async def claim(self, run_id: str, runner: str) -> bool:
        """Start this replica's queued run; False when it is no longer queued (taken for cut off meanwhile)."""
        def fn(s: Session) -> bool:
            now = utcnow()
            done = s.execute(update(EvaluationRow).where(EvaluationRow.id == run_id, EvaluationRow.status == QUEUED,
                                                         EvaluationRow.runner == runner)
                             .values(status=RUNNING, heartbeat_at=now, started_at=now))
            return bool(done.rowcount)  # type: ignore[attr-defined]  # a CursorResult
        return await self._do(fn)

    async def beat(self, run_id: str, runner: str) -> None:
        await self._do(lambda s: s.execute(update(EvaluationRow).where(
            EvaluationRow.id == run_id, EvaluationRow.runner == runner).values(heartbeat_at=utcnow())))

    async def progress(self, run_id: str, runner: str, done: int, version: int | None = None) -> None:
        values: dict[str, Any] = {"done": done, "heartbeat_at": utcnow()}
        if version is not None:
            values["version"] = version
        await self._do(lambda s: s.execute(update(EvaluationRow).where(
            EvaluationRow.id == run_id, EvaluationRow.runner == runner).values(**values)))

    async def finish(self, run_id: str, runner: str, *, status: str, metrics: dict | None = None,
                     results: dict | None = None, error: str | None = None) -> Run:
        def fn(s: Session) -> Run:
            values: dict[str, Any] = {"status": status, "metrics": metrics, "results": results, "error": error,
                                      "finished_at": utcnow(), "heartbeat_at": None}
            if status == SUCCEEDED:
                values["done"] = EvaluationRow.total
            s.execute(update(EvaluationRow).where(EvaluationRow.id == run_id, EvaluationRow.runner == runner)
                      .values(**values))
            row = s.get(EvaluationRow, run_id)
            if row is None:
                raise missing(run_id)
            return _run(row)
        return await self._do(fn)

    async def fail_queued(self, run_id: str, error: str) -> None:
        await self._do(lambda s: s.execute(update(EvaluationRow).where(
            EvaluationRow.id == run_id, EvaluationRow.status.in_(ACTIVE)).values(
            status=FAILED, error=error, finished_at=utcnow())))

    async def mark_interrupted(self, *, everything: bool) -> int:
        """Runs cut off by a restart: every queued or running one (``everything``: the only process using this
        database is starting), else those whose replica stopped beating (queued ones beat too)."""
        def fn(s: Session) -> int:
            stale = utcnow() - timedelta(seconds=STALE_S)
            cut: Any = EvaluationRow.status.in_(ACTIVE)
            if not everything:
                cut = cut & or_(EvaluationRow.heartbeat_at.is_(None), EvaluationRow.heartbeat_at < stale)
            done = s.execute(update(EvaluationRow).where(cut).values(
                status=INTERRUPTED, finished_at=utcnow(), error="interrupted: the engine restarted (or its replica "
                "stopped) before the run finished; start it again"))
            return int(done.rowcount)  # type: ignore[attr-defined]  # a CursorResult
        return await self._do(fn)

    async def recent(self, index: str, version: int, fingerprint: str, since: datetime) -> Run | None:
        """The newest succeeded run of this version on this set, finished after ``since``."""
        def fn(s: Session) -> Run | None:
            row = s.scalars(select(EvaluationRow).where(
                EvaluationRow.index_name == index, EvaluationRow.version == version,
                EvaluationRow.fingerprint == fingerprint, EvaluationRow.status == SUCCEEDED,
                EvaluationRow.finished_at >= since).order_by(EvaluationRow.finished_at.desc()).limit(1)).first()
            return _run(row) if row is not None else None
        return await self._do(fn)

    async def last_created(self, index: str, trigger: str) -> datetime | None:
        """When the index's newest run of this trigger was created (schedules: whether one is due)."""
        def fn(s: Session) -> datetime | None:
            return s.scalars(select(EvaluationRow.created_at).where(
                EvaluationRow.index_name == index, EvaluationRow.trigger == trigger)
                .order_by(EvaluationRow.created_at.desc()).limit(1)).first()
        return await self._do(fn)

    async def latest(self, limit_per_index: int = 2) -> dict[str, list[Run]]:
        """Per index, its newest finished successful runs (newest first), without their questions and results
        (read every 30 s for /health and the gauges: the small columns only)."""
        def fn(s: Session) -> dict[str, list[Run]]:
            rows = s.execute(select(*_SMALL).where(EvaluationRow.status == SUCCEEDED)
                             .order_by(EvaluationRow.index_name, EvaluationRow.finished_at.desc())).all()
            out: dict[str, list[Run]] = {}
            for r in rows:
                runs = out.setdefault(r.index_name, [])
                if len(runs) < limit_per_index:
                    runs.append(_light(r))
            return out
        return await self._do(fn)

    async def forget_index(self, index: str) -> None:
        await self._do(lambda s: s.execute(delete(EvaluationRow).where(EvaluationRow.index_name == index)))

    # -- golden sets handed over by source syncs --------------------------------------------------------
    async def put_golden_set(self, index: str, source: str, path: str, revision: str | None,
                             questions: list[dict]) -> datetime:
        def fn(s: Session) -> datetime:
            row = s.get(GoldenSetRow, index) or GoldenSetRow(index_name=index)
            row.source, row.path, row.revision, row.questions = source, path, revision, {"items": questions}
            row.updated_at = utcnow()
            s.merge(row)
            return row.updated_at
        return await self._do(fn)

    async def golden_set(self, index: str) -> tuple[str, str, str | None, list[dict], datetime] | None:
        """(source, path, revision, questions, updated_at) of the set a sync handed over for ``index``."""
        def fn(s: Session) -> tuple[str, str, str | None, list[dict], datetime] | None:
            row = s.get(GoldenSetRow, index)
            return None if row is None else (row.source, row.path, row.revision,
                                             list((row.questions or {}).get("items", [])), row.updated_at)
        return await self._do(fn)
