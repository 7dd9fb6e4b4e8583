"""The evaluation service: runs (API, gate, schedule), their bounds, and the gate of gated re-indexes.

- A run belongs to the principal that started it and runs as that principal: its document ACL applies to
  every retrieval, exactly as on its own ``/retrieve`` (an admin's run, and the engine's own scheduled and
  configured-gate runs, see every document). Others see it as missing (admins see every run).
- Bounded: at most ``evaluation_max_questions`` questions a run, ``evaluation_concurrent_runs`` runs at once
  per replica (the others wait, queued), the newest ``evaluation_runs_kept`` runs per index kept.
- A run scores one version: the one it names, else the live one when it starts; a swap meanwhile changes
  nothing for it.
- The gate (``gate_check``, called by the re-index job before its swap): the new version is scored on the
  gate's set and settings, the live version too unless a run of it on the same set and settings finished
  within ``evaluation_reuse_s``; ``gate.decide`` says whether it may go live.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ragengine import metrics as prom
from ragengine.access.decide import document_acl
from ragengine.access.rules import Principal, Role
from ragengine.errors import BadRequest, EngineError, NotFound
from ragengine.evaluation import gate as gates
from ragengine.evaluation import golden, runner
from ragengine.evaluation import metrics as m
from ragengine.evaluation.answers import AnswerScorer
from ragengine.evaluation.store import FAILED, SUCCEEDED, EvaluationStore, Run
from ragengine.guardrails.runtime import Guardrails
from ragengine.index.documents import retrieval_request
from ragengine.protocol.evaluations import EvaluationRequest, GateRequest, RetrievalSettings
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.llm.client import LLMClient
    from ragengine.versions.registry import VersionedRegistry

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 1.0
BEAT_S = 10.0
MAINTAIN_S = 30.0


class EvaluationService:
    def __init__(self, settings: EngineSettings, registry: VersionedRegistry, store: EvaluationStore,
                 llm: LLMClient | None = None, guardrails: Guardrails | None = None) -> None:
        self.settings, self.registry, self.store, self.llm = settings, registry, store, llm
        self.guardrails = guardrails  # the output policy the answers a run keeps pass through
        self.replica = uuid.uuid4().hex[:12]
        self.slots = asyncio.Semaphore(settings.evaluation_concurrent_runs)
        self.tasks: dict[str, asyncio.Task] = {}
        self.last: dict[str, list[dict]] = {}  # index -> its newest succeeded runs' summaries (/health, gauges)
        self.configured: Any = None  # the evaluation file's settings (config.Configured), when there is one
        self.configured_error: str | None = None  # why the evaluation file is not applied
        self.schedule_since: datetime | None = None  # a cron schedule's first run counts from here (config.run_due)
        self._loop: asyncio.Task | None = None
        # One refresh at a time: a refresh that read the runs before a run finished must not set the gauges after
        # one that read them since (seen under load: the newest version's score missing from /metrics).
        self._refreshing = asyncio.Lock()
        self._shown: frozenset[tuple[str, ...]] = frozenset()  # the gauges' series this service set

    # -- start / stop ------------------------------------------------------------------------------
    async def start(self) -> None:
        # One process per FAISS data directory: every run left active was this process's predecessor's.
        # External stores: only runs whose replica stopped beating (any replica marks them, also later).
        found = await self.store.mark_interrupted(everything=not getattr(self.registry, "shared", False))
        if found:
            log.warning("%d evaluation run(s) were cut off by a restart: marked interrupted", found)
        await self.refresh()
        self.registry.gate_check = self.gate_check
        self.registry.default_gate = self.default_gate
        self._loop = asyncio.create_task(self._maintain(), name="evaluations")

    async def _maintain(self) -> None:
        """Other replicas' runs: those cut off are marked, the newest scores read (for /health and /metrics)."""
        while True:
            await asyncio.sleep(MAINTAIN_S)
            try:
                if getattr(self.registry, "shared", False):
                    await self.store.mark_interrupted(everything=False)
                await self.refresh()
            except Exception as exc:  # the database away for a while: next time
                log.warning("evaluations: %s", exc)

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop
        for task in list(self.tasks.values()):
            task.cancel()
        for task in list(self.tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- runs --------------------------------------------------------------------------------------
    def _owner(self, principal: Principal | None) -> str | None:
        return None if principal is None else principal.id

    @staticmethod
    def _acl(principal: Principal | None) -> list[str] | None:
        acl = document_acl(principal) if principal is not None else None
        return None if acl is None else list(acl.tokens)

    @staticmethod
    def _reader(principal: Principal | None) -> str | None:
        """Whose runs a principal sees: their own (None: every run, for admins and the engine itself)."""
        return None if principal is None or principal.role >= Role.admin else principal.id

    async def create(self, index: str, body: EvaluationRequest, principal: Principal | None) -> Run:
        questions = golden.check(body.questions, self.settings.evaluation_max_questions)
        settings = self._settings(body)
        if body.version is not None:
            await self.registry.servable(index, body.version)  # 404 / 409 now, not a failed run later
        else:
            await self.registry.book(index)
        settings["answers"] = body.answers
        return await self._submit(index, body.version, questions, settings, principal, "api")

    def _settings(self, body: RetrievalSettings) -> dict:
        if body.top_k > self.settings.max_top_k:
            raise BadRequest(f"top_k must be between 1 and {self.settings.max_top_k}.", param="top_k")
        # /retrieve's own checks of the filters, now: a bad filter is a 400 here, not a failed run later
        retrieval_request("check", body.top_k, filters=body.filters, metadata_filter=body.metadata_filter,
                          max_chunks_per_document=body.max_chunks_per_document, max_top_k=self.settings.max_top_k)
        return golden.retrieval_settings(body)

    async def _submit(self, index: str, version: int | None, questions: list[dict], settings: dict,
                      principal: Principal | None, trigger: str, *, acl: Any = "principal",
                      owner: Any = "principal", run_id: str | None = None) -> Run:
        acl = self._acl(principal) if acl == "principal" else acl
        owner = self._owner(principal) if owner == "principal" else owner
        run = await self.store.create(index=index, version=version, trigger=trigger, owner=owner, acl=acl,
                                      fingerprint=golden.fingerprint(questions, settings, acl), settings=settings,
                                      questions=questions, runner=self.replica, run_id=run_id or _new_id())
        task = asyncio.create_task(self._execute(run), name=f"evaluation-{run.id}")
        self.tasks[run.id] = task
        task.add_done_callback(self._forget_task)
        return run

    def _forget_task(self, task: asyncio.Task) -> None:
        for run_id, known in list(self.tasks.items()):
            if known is task:
                self.tasks.pop(run_id, None)

    async def _execute(self, run: Run) -> Run:
        """Wait for a slot (beating, so the run is not taken for cut off), claim it, score it, record it."""
        while True:
            try:
                await asyncio.wait_for(self.slots.acquire(), BEAT_S)
                break
            except TimeoutError:
                await self.store.beat(run.id, self.replica)  # queued, not cut off
        try:
            if not await self.store.claim(run.id, self.replica):
                return await self.store.get(run.id)
            prom.EVALUATION_RUNNING.inc()
            try:
                return await self._score(run)
            finally:
                prom.EVALUATION_RUNNING.dec()
        finally:
            self.slots.release()

    async def _score(self, run: Run) -> Run:
        started = time.monotonic()
        try:
            version = run.version or (await self.registry.book(run.index)).live
            await self.store.progress(run.id, self.replica, 0, version)
            beat = _Beat(self.store, run.id, self.replica)
            scorer = AnswerScorer(self.llm, self.registry.embedder, self.settings, self.guardrails) \
                if run.settings.get("answers") else None
            scores, results = await runner.score(self.registry, run.index, version, run.questions, run.settings,
                                                 run.acl, beat, scorer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            why = exc.message if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
            log.warning("evaluation %s of index %r failed: %s", run.id, run.index, why)
            prom.EVALUATION_RUNS.labels(run.trigger, FAILED).inc()
            return await self.store.finish(run.id, self.replica, status=FAILED, error=why[:2000])
        done = await self.store.finish(run.id, self.replica, status=SUCCEEDED,
                                       metrics={k: round(v, 6) for k, v in scores.items()}, results=results)
        prom.EVALUATION_RUNS.labels(run.trigger, SUCCEEDED).inc()
        prom.EVALUATION_SECONDS.observe(time.monotonic() - started)
        log.info("evaluation %s of index %r version %s: %s", run.id, run.index, version, done.metrics)
        await self.refresh()
        return done

    async def wait(self, run_id: str, timeout_s: float | None = None) -> Run:
        task = self.tasks.get(run_id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        return await self.store.get(run_id)

    async def get(self, index: str, run_id: str, principal: Principal | None) -> Run:
        return await self.store.get(run_id, index, self._reader(principal))

    async def runs(self, index: str, principal: Principal | None, limit: int) -> list[Run]:
        return await self.store.runs(index, self._reader(principal), limit)

    async def compare(self, index: str, base_id: str, other_id: str, principal: Principal | None) -> dict:
        base, other = await self.get(index, base_id, principal), await self.get(index, other_id, principal)
        for run in (base, other):
            if run.status != SUCCEEDED:
                raise BadRequest(f"Evaluation '{run.id}' is {run.status}: only finished runs can be compared.")
        a = {r["id"]: r for r in (base.results or {}).get("items", [])}
        b = {r["id"]: r for r in (other.results or {}).get("items", [])}
        better, worse, same = [], [], 0
        for qid in sorted(set(a) & set(b)):
            before, after = m.outcome(a[qid]), m.outcome(b[qid])
            row = {"id": qid, "base_rank": a[qid]["first_relevant_rank"], "other_rank": b[qid]["first_relevant_rank"],
                   "base_mrr": a[qid]["mrr"], "other_mrr": b[qid]["mrr"]}
            if after > before:
                better.append(row)
            elif after < before:
                worse.append(row)
            else:
                same += 1
        one, two = base.metrics or {}, other.metrics or {}
        deltas = {k: round(two[k] - one[k], 6) for k in sorted(set(one) & set(two))}
        return {"base": base.summary(), "other": other.summary(), "deltas": deltas, "better": better, "worse": worse,
                "unchanged": same, "only_in_base": sorted(set(a) - set(b)), "only_in_other": sorted(set(b) - set(a))}

    # -- the gate ------------------------------------------------------------------------------------
    async def prepare_gate(self, index: str, body: GateRequest,
                           principal: Principal | None) -> tuple[dict, Callable[[], Awaitable[None]]]:
        """(what a re-index's job carries as its gate, what to do once the job started), checked now: a bad gate
        is a 4xx and nothing starts. The set goes by reference: an inline set becomes a run of the live version
        (the gate's baseline), created only once the re-index started, so a refused re-index stores nothing."""
        try:
            _name, k = m.metric_name(body.metric)
        except ValueError as exc:
            raise BadRequest(str(exc), param="gate.metric") from None
        if (body.questions is None) == (body.evaluation_id is None):
            raise BadRequest("The gate needs exactly one of questions (the set, inline) or evaluation_id.",
                             param="gate")
        after: Callable[[], Awaitable[None]] = _nothing
        if body.evaluation_id is not None:
            if body.settings is not None:
                raise BadRequest("gate.settings goes with gate.questions: an evaluation_id brings its own.",
                                 param="gate.settings")
            run = await self.get(index, body.evaluation_id, principal)
            top_k = run.settings.get("top_k")
            evaluation_id = run.id
        else:
            questions = golden.check(body.questions or [], self.settings.evaluation_max_questions, "gate.questions")
            settings = self._settings(body.settings or RetrievalSettings(top_k=k))
            top_k = settings["top_k"]
        if top_k != k:
            raise BadRequest(f"The gate's metric {body.metric} needs the set scored at top_k {k}; it is scored at "
                             f"top_k {top_k}.", param="gate.metric")
        if body.questions is not None:
            live = (await self.registry.book(index)).live
            evaluation_id = _new_id()

            async def after() -> None:
                await self._submit(index, live, questions, {**settings, "answers": False}, principal, "gate",
                                   run_id=evaluation_id)
        gate = {"metric": body.metric.strip().lower(), "minimum": body.minimum, "max_regression": body.max_regression,
                "evaluation_id": evaluation_id}
        return gate, after

    async def submit_configured(self, index: str, trigger: str) -> Run:
        """A run of the evaluation file's set, as the engine (every document counts)."""
        questions, settings, owner, acl = self.configured.golden_set(index)
        return await self._submit(index, None, questions, {**settings, "answers": False}, None, trigger,
                                  acl=acl, owner=owner)

    def default_gate(self, index: str) -> dict | None:
        configured = self.configured
        return configured.gate_for(index) if configured is not None else None

    async def gate_check(self, index: str, job: Any, say: Callable[[str], Awaitable[None]]) -> dict:
        """The verdict on the version ``job`` built (called by the versions layer before its swap)."""
        spec = job.gate
        if spec.get("configured"):
            if self.configured is None:
                raise RuntimeError("this re-index has the engine's configured gate, but the engine has no evaluation "
                                   f"file in force now ({self.configured_error or 'none is set'})")
            questions, settings, owner, acl = self.configured.golden_set(index)
        else:
            ref = await self.store.get(spec["evaluation_id"], index)
            questions, settings, owner, acl = ref.questions, ref.settings, ref.owner, ref.acl
        settings = {**settings, "answers": False}
        if spec.get("evaluation_id") in self.tasks:  # an inline set's baseline run, still scoring the live version
            await self.wait(spec["evaluation_id"])
        candidate = await self._gate_run(index, job.version, questions, settings, owner, acl, say, "new")
        book = await self.registry.book(index)
        since = candidate.created_at - timedelta(seconds=self.settings.evaluation_reuse_s)
        baseline = await self.store.recent(index, book.live, candidate.fingerprint, since)
        if baseline is None and spec.get("max_regression") is not None:
            baseline = await self._gate_run(index, book.live, questions, settings, owner, acl, say, "live")
        metric = spec["metric"]
        verdict = gates.decide(metric, (candidate.metrics or {})[metric],
                               (baseline.metrics or {})[metric] if baseline else None,
                               spec.get("minimum"), spec.get("max_regression"), version=job.version, live=book.live)
        prom.EVALUATION_GATES.labels("passed" if verdict.passed else "rejected").inc()
        return {**verdict.to_dict(), "candidate_run": candidate.id, "baseline_run": baseline.id if baseline else None}

    async def _gate_run(self, index: str, version: int, questions: list[dict], settings: dict, owner: str | None,
                        acl: list[str] | None, say: Callable[[str], Awaitable[None]], which: str) -> Run:
        run = await self._submit(index, version, questions, settings, None, "gate", acl=acl, owner=owner)
        while True:
            task = self.tasks.get(run.id)
            if task is None or task.done():
                break
            current = await self.store.get(run.id)
            await say(f"scoring the {which} version {version}: {current.done} of {current.total} questions")
            await asyncio.wait({task}, timeout=5.0)
        done = await self.store.get(run.id)
        if done.status != SUCCEEDED:
            raise RuntimeError(f"the gate's evaluation {run.id} of version {version} {done.status}: {done.error}")
        return done

    # -- what /health and /metrics show ---------------------------------------------------------------
    async def refresh(self) -> None:
        async with self._refreshing:
            latest = await self.store.latest()
            self.last = {index: [r.summary() for r in runs] for index, runs in latest.items()}
            self._shown = prom.set_evaluation_scores(
                {index: [(r.version, r.metrics or {}, _epoch(r.finished_at)) for r in runs]
                 for index, runs in latest.items()}, self._shown)

    def health(self) -> dict:
        """Per index, its last run (and the one before): what the operator copies into status.evaluation; and
        the evaluation file's state."""
        out: dict[str, Any] = {"indexes": {index: {**runs[0], "previous": runs[1] if len(runs) > 1 else None}
                                           for index, runs in sorted(self.last.items()) if runs}}
        configured = self.configured
        if configured is not None or self.configured_error is not None:
            out["configured"] = {
                "index": configured.file.index if configured else None,
                "questions": len(configured.questions) if configured else None,
                "schedule": configured.file.schedule if configured else None,
                "gate": configured.gate_for(configured.file.index) if configured else None,
                "error": self.configured_error}
        return out

    async def forget_index(self, index: str) -> None:
        with contextlib.suppress(NotFound):
            await self.store.forget_index(index)
        self.last.pop(index, None)
        await self.refresh()


def _epoch(at: Any) -> float | None:
    from datetime import UTC

    return None if at is None else at.replace(tzinfo=UTC).timestamp()


def _new_id() -> str:
    return f"eval_{uuid.uuid4().hex}"


async def _nothing() -> None:
    return None


class _Beat:
    """Progress of a run in the database, at most every second (it is also the run's heartbeat)."""

    def __init__(self, store: EvaluationStore, run_id: str, runner_id: str) -> None:
        self.store, self.run_id, self.runner_id = store, run_id, runner_id
        self.at = 0.0

    async def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.at >= PROGRESS_EVERY_S:
            self.at = now
            await self.store.progress(self.run_id, self.runner_id, done)
