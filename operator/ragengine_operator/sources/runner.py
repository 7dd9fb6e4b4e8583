"""The operator's source syncer: one loop for every source of every RAGEngine, next to resync.py.

Why a loop and not a kopf daemon per RAGEngine: a daemon makes kopf put a finalizer on the object,
and deletion would then wait for the operator (see resync.py). The loop reads kopf's in-memory index
of RAGEngines that have sources (spec, status.sources, EngineReady), so deciding what is due costs no
API call; each due source syncs in a worker thread, never inside a reconcile, so a slow git server
holds up neither the RAGEngine's children nor its other sources. One sync per source at a time, and
one operator: each revision is synced once whatever the number of engine replicas.

What survives a restart: ``status.sources[]`` (revision, digest of the spec synced, counts). A
restarted operator re-reads it, so a source already at its revision is checked, not re-synced; a
sync cut off half-way is re-planned from the engine's content hashes and finishes.

Workers are shared fairly: at most ``source_workers`` syncs run at once, and at most
``source_workers_per_namespace`` of one namespace, so a tenant with many slow sources leaves workers
to the others. Every failure of a sync, expected or not, is a failed result: status, an Event and
backoff, never a retry at the next tick. A removed source, or a RAGEngine that goes away, loses its
git cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from .. import constants as c
from ..controller import Controller, api_message, post
from ..kube import apply as kube
from ..manifests.engine import endpoint
from ..manifests.labels import Owner
from . import cache as clones
from .engine import EngineClient, EngineUnavailable
from .fetch import Fetched, FetchError, from_configmap
from .plan import SyncPlan
from .spec import Source
from .status import SourceState, after_sync, due, retry_delay, sync_event, syncing, visible, waiting
from .sync import FetchPolicy, SyncResult, fetch, source_secret, sync_source, unexpected

log = logging.getLogger(__name__)
TICK_SECONDS = 1.0
PROGRESS_EVERY_S = 10.0  # a long sync shows its progress in status.sources at most this often
SWEEP_EVERY_S = 600.0  # git cache folders of RAGEngines gone while the operator was down
Key = tuple[str, str]


class FairSlots:
    """``total`` workers, at most ``per_namespace`` of them (running or queued for one) per namespace.

    A sync first takes its namespace's slot, then a global one; the global queue is FIFO, so it never
    holds more than ``per_namespace`` entries of one tenant and every namespace's next sync is at most
    a few places from the front."""

    def __init__(self, total: int, per_namespace: int) -> None:
        self.total = asyncio.Semaphore(total)
        self.per_namespace = min(per_namespace, total)
        self.namespaces: defaultdict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(self.per_namespace))

    @contextlib.asynccontextmanager
    async def hold(self, namespace: str) -> AsyncIterator[None]:
        async with self.namespaces[namespace], self.total:
            yield


@dataclass(frozen=True)
class Target:
    """What the kopf index keeps of one RAGEngine with sources (see handlers.sourced)."""

    namespace: str
    name: str
    uid: str
    sources: tuple[Source, ...]
    entries: tuple[dict[str, Any], ...]  # status.sources[] as last written
    engine_ready: bool
    api_key_ref: tuple[str, str] | None  # (Secret, key) of the engine's API key when auth is on

    @classmethod
    def from_body(cls, namespace: str, name: str, uid: str, spec: Mapping, status: Mapping) -> Target | None:
        """None when there is nothing to sync or prune (no sources, none reported)."""
        if not spec.get("sources") and not status.get("sources"):
            return None
        try:
            sources = tuple(Source.model_validate(s) for s in spec.get("sources") or [])
        except ValueError as exc:  # the reconcile reports InvalidSpec for the whole object
            log.info("sources of %s/%s not synced: %s", namespace, name, exc)
            return None
        ready = any(x.get("type") == c.ENGINE_READY and x.get("status") == "True" for x in status.get("conditions") or [])
        ref = ((spec.get("auth") or {}).get("apiKeySecretRef")) or None
        return cls(namespace, name, uid, sources, tuple(status.get("sources") or ()), ready,
                   (ref["name"], ref.get("key", "api-key")) if ref else None)


@dataclass
class SourceSyncer:
    controller: Controller
    states: dict[Key, dict[str, SourceState]] = field(default_factory=dict)
    running: set[tuple[str, str, str]] = field(default_factory=set)
    locks: defaultdict[Key, threading.Lock] = field(default_factory=lambda: defaultdict(threading.Lock))
    prune_failures: dict[tuple[str, str, str], tuple[int, float]] = field(default_factory=dict)  # (count, when)

    @property
    def settings(self) -> Any:
        return self.controller.settings

    @property
    def cache_root(self) -> Path:
        return Path(self.settings.sources_cache_dir)

    def slots(self) -> FairSlots:
        return FairSlots(self.settings.source_workers, self.settings.source_workers_per_namespace)

    # --- the loop -------------------------------------------------------------------------------
    async def loop(self, index: Mapping[Key, Any]) -> None:
        slots = self.slots()
        tasks: set[asyncio.Task] = set()
        swept = time.monotonic()
        while True:
            await asyncio.sleep(TICK_SECONDS)
            targets = {key: next(iter(found)) for key, found in list(index.items()) if found}
            for gone in set(self.states) - set(targets):
                self.states.pop(gone, None)
                await asyncio.to_thread(clones.remove, self.cache_root, *gone)
            if time.monotonic() - swept > SWEEP_EVERY_S:
                swept = time.monotonic()
                await asyncio.to_thread(clones.sweep, self.cache_root, set(targets))
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
        for source in target.sources:
            if (*key, source.name) in self.running or not due(source, states.get(source.name), now):
                continue
            self.running.add((*key, source.name))
            started.append(asyncio.create_task(self._one(target, source, slots)))
        for name in set(states) - wanted:  # removed from the spec: its documents go too
            count, when = self.prune_failures.get((*key, name), (0, 0.0))
            if (*key, name) not in self.running and now >= when + retry_delay(count):
                self.running.add((*key, name))
                started.append(asyncio.create_task(self._prune(target, name, slots)))
        return started

    async def _one(self, target: Target, source: Source, slots: FairSlots) -> None:
        key = (target.namespace, target.name)
        try:
            async with slots.hold(target.namespace):
                before = self.states.setdefault(key, {}).get(source.name)
                reporter = ProgressReporter(self, target, source, before)
                if not target.engine_ready:
                    after, result = waiting(source, before, time.time()), None
                else:
                    try:
                        result = await asyncio.to_thread(self.sync_blocking, target, source, before, reporter)
                    except Exception as exc:  # sync_blocking reports its own; this is the last net
                        log.exception("sync of source %s of %s/%s failed", source.name, *key)
                        result = SyncResult(source.name, source.kind, ok=False, message=unexpected(exc))
                    after = after_sync(source, before, result, time.time())
                self.states.setdefault(key, {})[source.name] = after  # (the RAGEngine may be gone meanwhile)
                if before is None or visible(before) != visible(after) or reporter.reported:
                    await asyncio.to_thread(self.write_status, target)
                event = sync_event(source, before, after, result.written if result else 0)
                if event:
                    self._post(target, *event)
        except Exception:  # status or Event writes: never let one source's surprise stop the loop
            log.exception("reporting the sync of source %s of %s/%s failed", source.name, *key)
        finally:
            self.running.discard((*key, source.name))

    async def _prune(self, target: Target, name: str, slots: FairSlots) -> None:
        key = (target.namespace, target.name)
        index = next((e.get("index") for e in target.entries if e.get("name") == name), None) or name
        try:
            async with slots.hold(target.namespace):
                removed = await asyncio.to_thread(self.prune_blocking, target, name, index)
                self.states.setdefault(key, {}).pop(name, None)
                self.prune_failures.pop((*key, name), None)
                await asyncio.to_thread(clones.remove, self.cache_root, *key, name)
                await asyncio.to_thread(self.write_status, target)
                self._post(target, "Normal", "SourceRemoved",
                           f"source {name} left the spec: its {removed} document(s) were deleted from index {index}")
        except Exception as exc:  # retried with backoff, like a failed sync
            count = self.prune_failures.get((*key, name), (0, 0.0))[0] + 1
            self.prune_failures[(*key, name)] = (count, time.time())
            if isinstance(exc, EngineUnavailable | ApiException | FetchError):
                log.warning("documents of removed source %s of %s/%s not deleted yet: %s", name, *key, exc)
            else:
                log.exception("pruning removed source %s of %s/%s failed", name, *key)
        finally:
            self.running.discard((*key, name))

    # --- blocking work (worker threads) ------------------------------------------------------------
    def sync_blocking(self, target: Target, source: Source, state: SourceState | None,
                      progress: Callable[[str], None] | None = None) -> SyncResult:
        try:
            engine = self._engine(target)
        except FetchError as exc:
            return SyncResult(source.name, source.kind, ok=False, message=str(exc))
        except Exception as exc:
            return SyncResult(source.name, source.kind, ok=False, message=unexpected(exc))
        try:
            known = state.revision if state and state.synced else None
            if known is not None and not engine.has_index(source.index_name):
                known = None  # the index was lost (a new volume): sync everything again
            validators = state.validators if state and known else None

            def read() -> Fetched:
                holder = source.git or source.http
                ref = holder.secret_ref if holder is not None else None
                secret = self._secret(target.namespace, ref.name, for_source=True) if ref else None
                return fetch(source, cache=self.cache_root / target.namespace / target.name, secret=secret,
                             previous_revision=known, previous_validators=validators,
                             read_configmap=lambda: self._configmap(target, source, known),
                             policy=FetchPolicy.from_settings(self.settings))

            return sync_source(source, engine, read, known, progress)
        except EngineUnavailable as exc:
            return SyncResult(source.name, source.kind, ok=False, message=f"not synced: {exc}")
        except Exception as exc:  # every failure is a failed result: status, Event, backoff
            log.exception("sync of source %s of %s/%s failed", source.name, target.namespace, target.name)
            return SyncResult(source.name, source.kind, ok=False, message=unexpected(exc))
        finally:
            engine.close()

    def prune_blocking(self, target: Target, name: str, index: str) -> int:
        engine = self._engine(target)
        try:
            ids = sorted(engine.indexed(index, name))
            engine.apply(index, SyncPlan(delete=ids))
            return len(ids)
        finally:
            engine.close()

    def _engine(self, target: Target) -> EngineClient:
        template = self.settings.engine_url
        url = template.format(name=target.name, namespace=target.namespace) if template else endpoint(
            Owner(target.namespace, target.name, target.uid))
        api_key = None
        if target.api_key_ref:
            secret_name, secret_key = target.api_key_ref
            api_key = (self._secret(target.namespace, secret_name) or {}).get(secret_key)
            if not api_key:
                raise FetchError(f"the engine's API key (Secret {secret_name}, key {secret_key}) is empty")
        return EngineClient(url, api_key)

    def _secret(self, namespace: str, name: str, for_source: bool = False) -> dict[str, str]:
        try:
            obj = kube.get(self.controller.dyn, "v1", "Secret", namespace, name)
        except ApiException as exc:
            raise FetchError(f"Secret {name} cannot be read: {api_message(exc)}") from exc
        if obj is None:
            raise FetchError(f"Secret {name} not found in namespace {namespace}")
        if for_source:
            return source_secret(obj, namespace)
        return source_secret({"data": obj.get("data")}, namespace)  # the engine's key: any type

    def _configmap(self, target: Target, source: Source, known: str | None) -> Fetched:
        assert source.config_map is not None
        name = source.config_map.name
        try:
            obj = kube.get(self.controller.dyn, "v1", "ConfigMap", target.namespace, name)
        except ApiException as exc:
            raise FetchError(f"ConfigMap {name} cannot be read: {api_message(exc)}") from exc
        if obj is None:
            raise FetchError(f"ConfigMap {name} not found in namespace {target.namespace}")
        version = obj["metadata"]["resourceVersion"]
        if version == known:
            return Fetched(version, unchanged=True)
        return from_configmap(obj.get("data"), obj.get("binaryData"), source.config_map.keys, version)

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
    """Called in the sync's thread after each batch: writes "syncing <rev>: n of m documents written" to
    the source's status entry at most every PROGRESS_EVERY_S, so a first sync of a large repository
    shows how far it is in ``kubectl get rag -o yaml`` instead of nothing for minutes."""

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
