"""The operator's source syncer: one loop for every source of every RAGEngine, next to resync.py.

Why a loop and not a kopf daemon per RAGEngine: a daemon makes kopf put a finalizer on the object,
and deletion would then wait for the operator (see resync.py). The loop reads kopf's in-memory index
of RAGEngines that have sources (spec, status.sources, EngineReady), so deciding what is due costs no
API call. One sync per source at a time, and one operator: each revision is synced once whatever the
number of engine replicas.

Where a sync runs (issue 22): never in the operator's process nor with its identity, since it fetches
and parses tenant data. The operator keeps the scheduling, the status, the Events and the references;
a worker (sources/worker.py, ``ragengine-operator sync-source``) does fetch -> plan -> push and hands
back a SyncResult. ``settings.sync_mode`` picks where the worker runs:

- ``job`` (syncer/in_job.py): a Job in the RAGEngine's namespace (manifests/sync_job.py): no API
  token, its own limits and deadline, the namespace's NetworkPolicies; its result is the pod's
  termination message. The operator reads neither the source's credentials nor the engine's key: it
  checks the credentials Secret's type (a ServiceAccount token is refused) and a ConfigMap's
  resourceVersion, and names them in the Job.
- ``subprocess`` (syncer/in_subprocess.py): a child process with an empty environment (no
  KUBECONFIG, no token), rlimits and a deadline, for an operator run outside the cluster (the tests:
  kwok's pods run no containers). The operator reads the inputs and gives them on stdin.

What survives a restart: ``status.sources[]`` (revision, digest of the spec synced, counts). A
restarted operator re-reads it, so a source already at its revision is checked, not re-synced; a
sync cut off half-way is re-planned from the engine's content hashes and finishes. A ConfigMap whose
resourceVersion did not move is not handed to a worker at all, unless the engine became ready since
the last sync this process ran (a new volume may have lost the index: the worker checks and refills).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.rest import ApiException

from ragengine.observability import tracing

from .. import constants as c
from ..controller import Controller, post
from ..kube import apply as kube
from ..kube.apply import api_message
from ..manifests.engine import endpoint
from ..manifests.engine_env import engine_api_key_ref
from ..manifests.labels import Owner
from ..manifests.sync_job import SyncPod
from ..metrics import SOURCE_SYNCS
from ..sources.protocol import Limits, Prepared, SyncRequest, failed
from ..sources.status import (
    SourceState,
    after_sync,
    due,
    epoch,
    retry_delay,
    spec_digest,
    sync_event,
    sync_requests,
    syncing,
    visible,
    waiting,
)
from ..sources.sync import SyncResult, policy_settings
from ..sources.traced import TracingConfig, config_of, operator_span, result_attributes
from ..spec import AuthSpec, ObservabilitySpec
from ..spec.sources import IndexSettings, Source, effective_sources
from .in_job import JobRunner
from .in_subprocess import SubprocessRunner

log = logging.getLogger(__name__)
TICK_SECONDS = 1.0
PROGRESS_EVERY_S = 10.0  # a long sync shows its progress in status.sources at most this often
# Secrets that must never be sent to a URL a tenant chose: a ServiceAccount token is the namespace's
# API identity, a bootstrap token the node's.
REFUSED_SECRET_TYPES = ("kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token")
Key = tuple[str, str]
Progress = Callable[[str], None]


class FairSlots:
    """``total`` workers, at most ``per_namespace`` of them (running or queued for one) per namespace.

    A sync first takes its namespace's slot, then a global one; the global queue is FIFO, so it never
    holds more than ``per_namespace`` entries of one tenant and every namespace's next sync is at most
    a few places from the front: a tenant with many slow sources leaves workers to the others."""

    def __init__(self, total: int, per_namespace: int) -> None:
        self.total = asyncio.Semaphore(total)
        self.per_namespace = min(per_namespace, total)
        self.namespaces: defaultdict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(self.per_namespace))

    @contextlib.asynccontextmanager
    async def hold(self, namespace: str) -> AsyncIterator[None]:
        async with self.namespaces[namespace], self.total:
            yield


def known_revision(source: Source, state: SourceState | None) -> str | None:
    """The revision a sync may take as read (an unchanged git commit is then not read at all): the one
    synced last, while the spec is the one synced. An edited source (other paths, metadata, OCR languages,
    formats) is read again in full, since what its files become changed; unchanged documents still write
    nothing (the plan compares hashes)."""
    return state.revision if state and state.synced and state.digest == spec_digest(source) else None


@dataclass(frozen=True)
class Target:
    """What the kopf index keeps of one RAGEngine with sources (see handlers.sourced)."""

    namespace: str
    name: str
    uid: str
    sources: tuple[Source, ...]
    entries: tuple[dict[str, Any], ...]  # status.sources[] as last written
    engine_ready: bool
    api_key_ref: tuple[str, str] | None  # (Secret, key) of the engine's API key; None when auth is off
    engine_ready_since: float = 0.0  # epoch of EngineReady's last transition to True
    tracing: TracingConfig | None = None  # spec.observability.tracing (sources/traced.py)
    requests: tuple[tuple[str, str], ...] = ()  # (source, request) of sync-now annotations (status.sync_requests)
    golden_set: tuple[str, str] | None = None  # spec.evaluation.goldenSet.source: (source, path) (docs/evaluation.md)

    @classmethod
    def from_body(cls, namespace: str, name: str, uid: str, spec: Mapping, status: Mapping,
                  annotations: Mapping[str, str] | None = None) -> Target | None:
        """None when there is nothing to sync or prune (no sources, none reported)."""
        if not spec.get("sources") and not status.get("sources"):
            return None
        try:
            indexes = [IndexSettings.model_validate(i) for i in spec.get("indexes") or []]
            # each source with its index's settings (spec.indexes[]) where it has none of its own
            sources = tuple(effective_sources([Source.model_validate(s) for s in spec.get("sources") or []], indexes))
            auth = AuthSpec.model_validate(spec.get("auth") or {})
            observability = ObservabilitySpec.model_validate(spec.get("observability") or {})
        except ValueError as exc:  # the reconcile reports InvalidSpec for the whole object
            log.info("sources of %s/%s not synced: %s", namespace, name, exc)
            return None
        cond: Mapping[str, Any] = next(
            (x for x in status.get("conditions") or [] if x.get("type") == c.ENGINE_READY), {})
        ready = cond.get("status") == "True"
        since = (epoch(cond.get("lastTransitionTime")) or 0.0) if ready else 0.0
        ref = engine_api_key_ref(Owner(namespace, name, uid), auth)
        golden = ((spec.get("evaluation") or {}).get("goldenSet") or {}).get("source") or {}
        requests = tuple(sorted(sync_requests(annotations, [s.name for s in sources]).items()))
        return cls(namespace, name, uid, sources, tuple(status.get("sources") or ()), ready,
                   (ref.name, ref.key) if ref else None, since, config_of(observability.tracing), requests,
                   (golden["name"], golden["path"]) if golden.get("name") and golden.get("path") else None)

    @property
    def owner(self) -> Owner:
        return Owner(self.namespace, self.name, self.uid)


@dataclass
class SourceSyncer:
    controller: Controller
    pods: Mapping[Any, Any] = field(default_factory=dict)  # kopf index of sync pods (job mode)
    states: dict[Key, dict[str, SourceState]] = field(default_factory=dict)
    running: set[tuple[str, str, str]] = field(default_factory=set)
    locks: defaultdict[Key, threading.Lock] = field(default_factory=lambda: defaultdict(threading.Lock))
    # (namespace, name, source) -> when a worker last checked that source against its engine
    verified: dict[tuple[str, str, str], float] = field(default_factory=dict)
    # (namespace, name, source) of a removed source -> (failed prunes, when to try again)
    prunes: dict[tuple[str, str, str], tuple[int, float]] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # set on a sync request: no wait for the tick

    @property
    def settings(self) -> Any:
        return self.controller.settings

    @property
    def limits(self) -> Limits:
        s = self.settings
        return Limits(s.sync_memory, s.sync_cpu_seconds, s.sync_deadline_seconds)

    # --- the loop -------------------------------------------------------------------------------
    async def loop(self, index: Mapping[Key, Any]) -> None:
        slots = FairSlots(self.settings.source_workers, self.settings.source_workers_per_namespace)
        tasks: set[asyncio.Task] = set()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), TICK_SECONDS)
            self.wake.clear()
            targets = {key: next(iter(found)) for key, found in list(index.items()) if found}
            for gone in set(self.states) - set(targets):
                self.states.pop(gone, None)
            for target in targets.values():
                for task in self.start(target, slots):
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

    def start(self, target: Target, slots: FairSlots) -> list[asyncio.Task]:
        key = (target.namespace, target.name)
        states = self.states.setdefault(key, {e["name"]: SourceState.from_status(e) for e in target.entries})
        now = time.time()
        started = []
        wanted = {s.name for s in target.sources}
        requests = dict(target.requests)
        for source in target.sources:
            requested = requests.get(source.name)
            if (*key, source.name) in self.running or not due(source, states.get(source.name), now, requested):
                continue
            self.running.add((*key, source.name))
            started.append(asyncio.create_task(self._one(target, source, slots, requested)))
        for name in set(states) - wanted:  # removed from the spec: its documents go too
            if (*key, name) not in self.running and target.engine_ready and \
                    self.prunes.get((*key, name), (0, 0.0))[1] <= now:
                self.running.add((*key, name))
                started.append(asyncio.create_task(self._prune(target, name, slots)))
        return started

    async def _one(self, target: Target, source: Source, slots: FairSlots, requested: str | None = None) -> None:
        """``requested``: the sync request this sync answers (it is handled once the sync ran, whatever its
        outcome; one that came while it ran starts the next sync)."""
        key = (target.namespace, target.name)
        try:
            before = self.states.setdefault(key, {}).get(source.name)
            reporter = ProgressReporter(self, target, source, before)
            if not target.engine_ready:
                after, result = waiting(source, before, time.time()), None
            else:
                forced = requested is not None and requested != (before.handled_request if before else None)
                result = await self.sync(target, source, before, reporter, slots, forced)
                after = after_sync(source, before, result, time.time())
                if requested is not None:
                    after = replace(after, handled_request=requested)
            self.states.setdefault(key, {})[source.name] = after  # (the RAGEngine may be gone meanwhile)
            if before is None or visible(before) != visible(after) or reporter.reported:
                await asyncio.to_thread(self.write_status, target)
            event = sync_event(source, before, after, result.written if result else 0)
            if event:
                self._post(target, *event)
        except Exception:  # never let one source's surprise stop the loop
            log.exception("sync of source %s of %s/%s failed", source.name, *key)
        finally:
            self.running.discard((*key, source.name))

    async def _prune(self, target: Target, name: str, slots: FairSlots) -> None:
        key = (target.namespace, target.name)
        index = next((e.get("index") for e in target.entries if e.get("name") == name), None) or name
        try:
            async with slots.hold(target.namespace):
                request = SyncRequest("prune", name, index, self.engine_url(target))
                result = await self.dispatch(target, Prepared(request, api_key=target.api_key_ref))
                if not result.ok:  # retried with the same backoff as a failed sync
                    failures = self.prunes.get((*key, name), (0, 0.0))[0] + 1
                    self.prunes[(*key, name)] = (failures, time.time() + retry_delay(failures))
                    log.warning("documents of removed source %s of %s/%s not deleted yet: %s", name, *key,
                                result.message)
                    return
                self.prunes.pop((*key, name), None)
                self.states.setdefault(key, {}).pop(name, None)
                await asyncio.to_thread(self.write_status, target)
                self._post(target, "Normal", "SourceRemoved",
                           f"source {name} left the spec: its {result.written} document(s) were deleted from index {index}")
        except ApiException as exc:
            log.warning("documents of removed source %s of %s/%s not deleted yet: %s", name, *key, exc)
        finally:
            self.running.discard((*key, name))

    # --- one sync -----------------------------------------------------------------------------------
    async def sync(self, target: Target, source: Source, state: SourceState | None,
                   progress: Progress | None = None, slots: FairSlots | None = None, forced: bool = False) -> SyncResult:
        """One sync by a worker; never raises: every failure is a failed result (status, backoff, Event). Only the
        worker takes one of ``slots``: a refusal (a ServiceAccount token as credentials, a missing ConfigMap) or a
        ConfigMap at its revision is reported at once, not behind the namespace's running syncs."""
        try:
            prepared = await asyncio.to_thread(self.prepare, target, source, state, forced)
            if isinstance(prepared, SyncResult):
                return prepared
            async with slots.hold(target.namespace) if slots is not None else contextlib.nullcontext():
                result = await self.dispatch(target, prepared, progress)
        except Exception as exc:
            log.warning("sync of source %s of %s/%s failed: %s", source.name, target.namespace, target.name, exc)
            return SyncResult(source.name, source.kind, ok=False, message=f"not synced: {type(exc).__name__}: {exc}")
        if result.ok:
            self.verified[(target.namespace, target.name, source.name)] = time.time()
        return result

    def prepare(self, target: Target, source: Source, state: SourceState | None,
                forced: bool = False) -> Prepared | SyncResult:
        """The request and references for a worker, from API reads that never return a credential; or the
        result without a worker (refused credentials, a missing ConfigMap, a ConfigMap at its revision unless
        ``forced``: a sync request always reaches a worker, which checks the index too)."""
        known = known_revision(source, state)
        golden = target.golden_set[1] if target.golden_set and target.golden_set[0] == source.name else None
        request = SyncRequest("sync", source.name, source.index_name, self.engine_url(target),
                              source.model_dump(mode="json", by_alias=True, exclude_none=True), known,
                              state.validators if state and known else None, fetch_policy=policy_settings(self.settings),
                              golden_set_path=golden)
        ref = source.secret_ref
        if ref is not None:
            kind = kube.secret_type(self.controller.dyn, target.namespace, ref.name)
            if kind is None:
                return failed(request, f"Secret {ref.name} not found in namespace {target.namespace}")
            if kind in REFUSED_SECRET_TYPES:
                return failed(request, f"Secret {ref.name} is of type {kind}: refused as source credentials (they "
                                       "would be sent to the source's URL); use an Opaque Secret")
        account = source.s3.service_account_name if source.s3 else None
        if account is not None and not self.settings.allow_service_account_name:
            return failed(request, "s3.serviceAccountName is refused by the operator's policy (allowServiceAccountName "
                                   "is false): use a Secret in s3.secretRef")
        if account is not None and self.settings.sync_mode != "job":
            return failed(request, "s3.serviceAccountName needs the operator's sync mode job (a subprocess sync has no "
                                   "pod to run as a ServiceAccount): use a Secret in s3.secretRef")
        configmap = source.config_map.name if source.config_map else None
        if configmap is not None:
            found = kube.get_metadata(self.controller.dyn, "v1", "ConfigMap", target.namespace, configmap)
            if found is None:
                return failed(request, f"ConfigMap {configmap} not found in namespace {target.namespace}")
            version = found["metadata"]["resourceVersion"]
            checked = self.verified.get((target.namespace, target.name, source.name), 0.0)
            if version == known and checked >= target.engine_ready_since and not forced:
                return SyncResult(source.name, source.kind, ok=True, revision=version, message="up to date")
            request = replace(request, configmap_revision=version)
        return Prepared(request, ref.name if ref else None, configmap, target.api_key_ref, account)

    async def dispatch(self, target: Target, prepared: Prepared, progress: Progress | None = None) -> SyncResult:
        """Run the worker where settings.sync_mode says (syncer/in_job.py, syncer/in_subprocess.py), in the
        sync's span when the RAGEngine has tracing on (its traceparent goes to the worker in the request)."""
        s = self.settings
        with operator_span(target.tracing, prepared.request, target.namespace, target.name) as request:
            prepared = replace(prepared, request=request)
            if s.sync_mode == "job":
                result = await JobRunner(self.controller.dyn, SyncPod.from_settings(s), self.limits, self.pods).run(
                    target.owner, prepared, progress)
            else:
                result = await SubprocessRunner(self.controller.dyn, self.limits, s.sync_tmp_size).run(
                    target.owner, prepared, progress)
            tracing.annotate(**result_attributes(result))
            SOURCE_SYNCS.labels(request.action, "ok" if result.ok else "failed").inc()
            return result

    def engine_url(self, target: Target) -> str:
        template = self.settings.engine_url
        return template.format(name=target.name, namespace=target.namespace) if template else endpoint(target.owner)

    # --- status and events -------------------------------------------------------------------------
    def write_status(self, target: Target) -> None:
        """status.sources from what the syncer knows now (from any thread; serialised per RAGEngine)."""
        key = (target.namespace, target.name)
        with self.locks[key]:
            states = self.states.get(key, {})
            entries = [states[s.name].to_status(s) for s in target.sources if s.name in states]
            self._patch(target, entries)

    def _patch(self, target: Target, entries: list[dict[str, Any]]) -> None:
        try:
            kube.patch_status(self.controller.dyn, target.namespace, target.name, {"sources": entries})
            self.controller.sync_status(target.namespace, target.name)  # SourcesSynced follows
        except ApiException as exc:
            if exc.status != 404:  # 404: deleted meanwhile
                log.warning("status.sources of %s/%s not written: %s", target.namespace, target.name, api_message(exc))

    def _post(self, target: Target, kind: str, reason: str, message: str) -> None:
        """In a kopf handler's context (kopf finds its poster there), like the resync loop's reconciles."""
        if not self.settings.post_events or self.controller.kopf_context is None:
            return
        body = {"apiVersion": c.API_VERSION, "kind": c.KIND,
                "metadata": {"namespace": target.namespace, "name": target.name, "uid": target.uid}}
        self.controller.kopf_context.copy().run(post, body, kind, reason, message)


class ProgressReporter:
    """Called (in a thread) with each progress line of a running sync: writes it to the source's status
    entry at most every PROGRESS_EVERY_S, so a first sync of a large repository shows how far it is
    (``syncing <rev>: n of m documents written``, or ``syncing in Job <name> for 30 s``) instead of
    nothing for minutes."""

    def __init__(self, syncer: SourceSyncer, target: Target, source: Source, before: SourceState | None) -> None:
        self.syncer, self.target, self.source, self.before = syncer, target, source, before
        self.last = time.monotonic()
        self.reported = False

    def __call__(self, line: str) -> None:
        if time.monotonic() - self.last < PROGRESS_EVERY_S:
            return
        self.last = time.monotonic()
        key = (self.target.namespace, self.target.name)
        self.syncer.states.setdefault(key, {})[self.source.name] = syncing(self.source, self.before, line, time.time())
        self.syncer.write_status(self.target)
        self.reported = True
