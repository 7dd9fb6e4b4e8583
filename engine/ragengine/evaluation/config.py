"""The engine's evaluation file (``evaluation_file``; the operator renders it from ``spec.evaluation``):
which index the golden set is for, where the set is (a JSON Lines file: a mounted ConfigMap key), the
retrieval settings, the schedule, and the gate every re-index of that index gets when it names none.

    {"index": "handbook", "goldenSetFile": "/etc/ragengine/golden/golden.jsonl", "topK": 10,
     "schedule": "@every 6h", "gate": {"metric": "mrr@10", "minimum": 0.5, "maxRegression": 0.02}}

or, instead of ``goldenSetFile``, ``"goldenSetSource": {"name": "runbooks", "path": "eval/golden.jsonl"}``: the
set that source's sync handed over (``PUT /indexes/{name}/evaluations/golden-set``, kept in the database).

Both files are read again when they change (a ConfigMap edit reaches the pod within a minute or so,
without a restart). A bad file is logged and reported on ``/health`` (``evaluation_config``), and the last
good one stays in force. Scheduled runs run as the engine (every document counts), trigger ``schedule``;
replicas that share the database share the schedule too (a run is due when no scheduled run of the index
was created since the previous due time).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragengine.conversations.models import utcnow
from ragengine.errors import EngineError
from ragengine.evaluation import golden
from ragengine.evaluation import metrics as m
from ragengine.evaluation import schedule as sched
from ragengine.protocol.evaluations import RetrievalSettings
from ragengine.settings import EngineSettings
from ragengine.validation import validation_message

if TYPE_CHECKING:
    from ragengine.evaluation.service import EvaluationService

log = logging.getLogger(__name__)
LOOP_S = 5.0


class GateFile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    metric: str = "mrr@10"
    minimum: float | None = Field(None, ge=0, le=1)
    max_regression: float | None = Field(None, ge=0, le=1, alias="maxRegression")


class SourceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    path: str = Field(min_length=1)


class EvaluationFile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    index: str = Field(min_length=1)
    golden_set_file: str | None = Field(None, alias="goldenSetFile", min_length=1)
    golden_set_source: SourceFile | None = Field(None, alias="goldenSetSource")
    top_k: int = Field(10, ge=1, alias="topK")
    schedule: str | None = None
    gate: GateFile | None = None

    @model_validator(mode="after")
    def _one_set(self) -> EvaluationFile:
        if (self.golden_set_file is None) == (self.golden_set_source is None):
            raise ValueError("exactly one of goldenSetFile or goldenSetSource")
        return self


@dataclass(frozen=True)
class Configured:
    file: EvaluationFile
    questions: list[dict]
    settings: dict

    def gate_for(self, index: str) -> dict | None:
        if self.file.gate is None or index != self.file.index:
            return None
        g = self.file.gate
        return {"metric": g.metric.lower(), "minimum": g.minimum, "max_regression": g.max_regression,
                "configured": True}

    def golden_set(self, index: str) -> tuple[list[dict], dict, None, None]:
        """(questions, settings, owner, ACL): the engine's own, which sees every document."""
        if index != self.file.index:
            raise RuntimeError(f"the engine's evaluation file has no golden set for index {index!r}")
        return self.questions, self.settings, None, None


def read_file(path: Path) -> EvaluationFile:
    try:
        spec = EvaluationFile.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        why = validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ValueError(f"{path}: {why}") from None
    return spec


def load(path: Path, max_questions: int, handed: tuple | None = None) -> Configured:
    """The file and its golden set read and checked (``handed``: what a source's sync handed over, from
    ``EvaluationStore.golden_set``, for a ``goldenSetSource``); ValueError with the reason otherwise."""
    spec = read_file(path)
    if spec.schedule is not None:
        sched.parse(spec.schedule)
    if spec.gate is not None:
        _name, k = m.metric_name(spec.gate.metric)
        if k != spec.top_k:
            raise ValueError(f"{path}: the gate's metric {spec.gate.metric} needs topK {k}, not {spec.top_k}")
    settings = golden.retrieval_settings(RetrievalSettings(top_k=spec.top_k))
    if spec.golden_set_source is not None:
        ref = spec.golden_set_source
        if handed is None or (handed[0], handed[1]) != (ref.name, ref.path):
            raise ValueError(f"the golden set {ref.path} of source {ref.name} has not been handed to the engine yet "
                             "(it comes with the source's next sync)")
        return Configured(spec, handed[3], settings)
    source = Path(spec.golden_set_file or "")
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"the golden set {source}: {exc.strerror or exc}") from None
    try:
        questions = golden.parse_jsonl(text, max_questions)
    except EngineError as exc:
        raise ValueError(f"the golden set {source}: {exc.message}") from None
    return Configured(spec, questions, settings)


def _stamp(path: Path, configured: Configured | None) -> tuple:
    files = [path] + ([Path(configured.file.golden_set_file)] if configured and configured.file.golden_set_file else [])
    out: list[tuple[int, int, int] | None] = []
    for f in files:
        try:
            st = f.stat()
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


async def watch_configured(service: EvaluationService, settings: EngineSettings, loop_s: float = LOOP_S) -> None:
    """Read the evaluation file (and its golden set) when they change; start scheduled runs when due."""
    path = settings.evaluation_file
    assert path is not None, "watched only when the engine has an evaluation file"
    seen: tuple | None = None
    while True:
        handed = await _handed(service, path)
        stamp = (_stamp(path, service.configured), handed and handed[4])
        if stamp != seen:
            seen = stamp
            try:
                service.configured = await asyncio.to_thread(load, path, settings.evaluation_max_questions, handed)
                service.configured_error = None
                log.info("evaluation file: %d questions for index %r, schedule %s, gate %s",
                         len(service.configured.questions), service.configured.file.index,
                         service.configured.file.schedule, service.configured.file.gate)
            except ValueError as exc:
                service.configured_error = str(exc)[:1000]
                log.error("evaluation file not applied (the last good one stays): %s", exc)
            seen = (_stamp(path, service.configured), handed and handed[4])
        try:
            await run_due(service)
        except Exception:
            log.exception("scheduled evaluation")
        await asyncio.sleep(loop_s)


async def _handed(service: EvaluationService, path: Path) -> tuple | None:
    """What a source's sync handed over for the file's index, when the file names a source."""
    try:
        spec = await asyncio.to_thread(read_file, path)
    except ValueError:
        return None
    if spec.golden_set_source is None:
        return None
    return await service.store.golden_set(spec.index)


async def run_due(service: EvaluationService) -> str | None:
    """Start the configured set's scheduled run when it is due; its id, else None."""
    configured: Configured | None = service.configured
    if configured is None or configured.file.schedule is None:
        return None
    index = configured.file.index
    if not service.registry.exists(index):
        return None
    last = await service.store.last_created(index, "schedule")
    now = utcnow()
    if last is not None and sched.next_fire(configured.file.schedule, last) > now:
        return None
    if last is None and sched.interval_s(configured.file.schedule) is None:
        # A cron schedule's first run waits for its first due time after the engine first saw it.
        first = service.schedule_since or now
        service.schedule_since = first
        if sched.next_fire(configured.file.schedule, first) > now:
            return None
    run = await service.submit_configured(index, "schedule")
    return run.id
