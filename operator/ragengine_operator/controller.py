"""The reconcile loop's impure half: parse -> plan -> apply each child -> observe -> status -> events.

Level-based and idempotent: every call recomputes everything from the object and the cluster, so
a repeat, a timer tick or a restart after a crash all converge to the same children and status.
Calls for one RAGEngine are serialised by a lock (create/update, resync and child events may race).

Each child is applied on its own: one the API server refuses (a PVC grow without volume expansion,
a name held by someone else) is reported in `Degraded` by name with the server's reason, and the
other children are still applied. The object is then retried with exponential backoff by the
resync loop (reconcile/schedule.py), and an Event is posted once per distinct failure.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import random
import secrets
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from pydantic import ValidationError

from . import constants as c
from . import metrics
from .kube import apply as kube
from .kube.observe import observe
from .manifests.engine_env import inference_api_key_ref
from .manifests.inference import inference_api_key_secret
from .manifests.labels import Owner, secret_digest
from .reconcile.plan import name_conflict, plan, referenced_secrets
from .reconcile.schedule import next_due
from .reconcile.status import compute_status
from .settings import OperatorSettings
from .sources.egress import EgressPolicy
from .spec import RAGEngineSpec

log = logging.getLogger(__name__)
STATUS_KEYS = ("observedGeneration", "conditions", "endpoint", "inferenceUrl", "model", "inferenceReplicas",
               "inferenceSelector", "dataVolumeSize", "modelCacheVolumeSize")


def spec_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"spec.{loc}: {err['msg']}" if loc else f"spec: {err['msg']}")
    return "; ".join(parts)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def child_id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']} {obj['metadata']['name']}"


class Controller:
    def __init__(self, api: k8s.ApiClient, settings: OperatorSettings) -> None:
        self.api = api
        self.dyn = DynamicClient(api)
        self.settings = settings
        self._locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._applies = 0
        # Backoff and resync bookkeeping, per RAGEngine (in memory: a restart resyncs everything).
        self.failures: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.due: dict[tuple[str, str], float] = {}
        # kopf.event() finds kopf's event queue through context variables that kopf sets only for
        # its handlers: the resync loop runs its reconciles in a copy of a handler's context.
        self.kopf_context: contextvars.Context | None = None

    def remember_context(self) -> None:
        """Called from a kopf handler: keep its context for reconciles started outside handlers."""
        if self.kopf_context is None:
            self.kopf_context = contextvars.copy_context()

    def reconcile_outside_handlers(self, namespace: str, name: str) -> None:
        ctx = self.kopf_context
        if ctx is None:
            self.reconcile(namespace, name)
        else:
            ctx.copy().run(self.reconcile, namespace, name)

    def owner(self, body: dict[str, Any]) -> Owner:
        meta = body["metadata"]
        s = self.settings
        return Owner(meta["namespace"], meta["name"], meta["uid"], engine_image=s.engine_image, vllm_image=s.vllm_image,
                     operator_namespace=s.pod_namespace, operator_labels=tuple(sorted(s.pod_labels.items())))

    def _apply(self, obj: dict[str, Any]) -> None:
        kube.server_side_apply(self.dyn, obj)
        self._applies += 1
        if self.settings.crash_after_applies and self._applies >= self.settings.crash_after_applies:
            log.error("fault injection: exiting after %d applies", self._applies)
            os._exit(17)  # a hard kill mid-reconcile: no cleanup, no status write

    # --- entry points (handlers call these) -------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> None:
        """Apply every desired child (each on its own), delete the ones we control and no longer
        want, then write status. Failures end up in status and the retry schedule, never raised."""
        key = (namespace, name)
        with metrics.track(), self._locks[key]:
            body = kube.get(self.dyn, c.API_VERSION, c.KIND, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                self.forget(namespace, name)
                return  # gone or going: children follow through owner references
            owner = self.owner(body)
            try:
                spec = RAGEngineSpec.model_validate(body.get("spec") or {})
            except ValidationError as exc:
                # Permanent until the spec changes (an update event reconciles again): no backoff.
                self._write_status(body, owner, None, ("InvalidSpec", spec_error(exc)), advance=True)
                self._schedule(key, failed=False)
                return
            failures = self._apply_children(owner, spec)
            error = _error(failures)
            self._write_status(body, owner, spec, error, advance=error is None)
            self._schedule(key, failed=error is not None)
            if error:
                metrics.RECONCILE_ERRORS.labels(reason=error[0]).inc()

    def _apply_children(self, owner: Owner, spec: RAGEngineSpec) -> list[tuple[str, str, str]]:
        """-> [(reason, child, message)] for each child not brought to its desired state."""
        failures: list[tuple[str, str, str]] = []
        if spec.runs_vllm:
            failure = self._ensure_inference_key(owner)
            if failure:
                failures.append(failure)
        desired = plan(owner, spec, self._secret_digests(owner, spec))
        for obj in desired.apply:
            try:
                existing = kube.get(self.dyn, obj["apiVersion"], obj["kind"], owner.namespace, obj["metadata"]["name"])
                conflict = name_conflict(existing, owner)
                if conflict:
                    failures.append(("NameConflict", child_id(obj), conflict))
                    continue
                self._apply(obj)
            except ApiException as exc:
                failures.append(("ApplyFailed", child_id(obj), api_message(exc)))
        for ref in desired.delete:
            try:
                existing = kube.get(self.dyn, ref.api_version, ref.kind, owner.namespace, ref.name)
                if existing is not None and name_conflict(existing, owner) is None:
                    # uid precondition: never the object someone re-created since we looked
                    kube.delete(self.dyn, ref.api_version, ref.kind, owner.namespace, ref.name,
                                uid=existing["metadata"]["uid"])
            except ApiException as exc:
                failures.append(("DeleteFailed", f"{ref.kind} {ref.name}", api_message(exc)))
        return failures

    def _secret_digests(self, owner: Owner, spec: RAGEngineSpec) -> dict[str, str]:
        """Digest of each Secret the pods read: a rotated key changes the pod template, so the pods
        that read it restart and pick it up (env from a Secret is read only at container start)."""
        out = {}
        for name in sorted(referenced_secrets(owner, spec)):
            try:
                out[name] = secret_digest(kube.get(self.dyn, "v1", "Secret", owner.namespace, name))
            except ApiException as exc:  # no read access: no rotation tracking for it, nothing else breaks
                log.info("cannot read Secret %s/%s: %s", owner.namespace, name, api_message(exc))
        return out

    def _ensure_inference_key(self, owner: Owner) -> tuple[str, str, str] | None:
        """Create vLLM's API key Secret once (a random key); never re-applied, so it never rotates
        under a running engine. Delete the Secret to rotate: the next reconcile makes a new one."""
        ref = inference_api_key_ref(owner)
        try:
            existing = kube.get(self.dyn, "v1", "Secret", owner.namespace, ref.name)
            conflict = name_conflict(existing, owner)
            if conflict:
                return "NameConflict", f"Secret {ref.name}", conflict
            if existing is None:
                self._apply(inference_api_key_secret(owner, secrets.token_urlsafe(32)))
        except ApiException as exc:
            return "ApplyFailed", f"Secret {ref.name}", api_message(exc)
        return None

    def sync_status(self, namespace: str, name: str) -> None:
        """Recompute status from the children only (a child changed); never applies."""
        with self._locks[(namespace, name)]:
            body = kube.get(self.dyn, c.API_VERSION, c.KIND, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return
            try:
                spec = RAGEngineSpec.model_validate(body.get("spec") or {})
            except ValidationError:
                return  # reconcile reports it
            # A refused apply of the current generation still stands until a reconcile succeeds:
            # a child's event must not flip the RAGEngine back to Ready over it.
            self._write_status(body, self.owner(body), spec, pending_error(body), advance=False)

    # --- scheduling (the resync loop in handlers.py asks what is due) ------------------------------
    def _schedule(self, key: tuple[str, str], failed: bool) -> None:
        self.failures[key] = self.failures[key] + 1 if failed else 0
        s = self.settings
        self.due[key] = next_due(time.monotonic(), self.failures[key], s.resync_seconds, s.resync_jitter, random.random())

    def mark_failed(self, namespace: str, name: str) -> None:
        self._schedule((namespace, name), failed=True)

    def is_due(self, namespace: str, name: str, at: float) -> bool:
        return self.due.get((namespace, name), 0.0) <= at

    def forget(self, namespace: str, name: str) -> None:
        self.due.pop((namespace, name), None)
        self.failures.pop((namespace, name), None)

    # --- status ----------------------------------------------------------------------------------
    def _write_status(self, body: dict, owner: Owner, spec: RAGEngineSpec | None, error: tuple[str, str] | None,
                      advance: bool) -> None:
        current = body.get("status") or {}
        # observedGeneration moves only when a reconcile of that generation finished.
        generation = body["metadata"].get("generation") if advance else current.get("observedGeneration")
        observed = observe(self.dyn, owner, spec, probe_external=self.settings.probe_external_inference,
                           probe_engine=self.settings.probe_engine_readiness, egress=EgressPolicy.from_settings(self.settings))
        observed.sources = current.get("sources")
        status, changes = compute_status(owner, spec, generation, observed, current.get("conditions") or [], now(), error)
        if all(status.get(k) == current.get(k) for k in STATUS_KEYS):
            return
        try:
            kube.patch_status(self.dyn, owner.namespace, owner.name, status)
        except ApiException as exc:
            if exc.status == 404:
                return  # deleted since we read it: nothing to report on
            raise
        metrics.STATUS_WRITES.inc()
        if self.settings.post_events:
            # Ready and Degraded carry the story (kubectl describe); the component conditions'
            # transitions are in status and would triple the Event writes at scale.
            for cond in changes:
                if cond["type"] in (c.READY, c.DEGRADED):
                    post_event(body, cond)


def post_event(body: dict, cond: dict[str, Any]) -> None:
    """One Event per transition or distinct failure, through kopf's own poster (batched, retried)."""
    bad = cond["type"] == c.DEGRADED and cond["status"] == "True"
    post(body, "Warning" if bad else "Normal", cond["reason"], f"{cond['type']}={cond['status']}: {cond['message']}")


def post(body: Any, kind: str, reason: str, message: str) -> None:
    """An Event through kopf's poster; outside a running operator (unit tests) there is none."""
    try:
        kopf.event(body, type=kind, reason=reason, message=message[:1024])
    except LookupError:
        log.debug("no kopf poster: event %s not posted", reason)


def _error(failures: list[tuple[str, str, str]]) -> tuple[str, str] | None:
    """The (reason, message) for Degraded: the first failure's reason, every failing child named."""
    if not failures:
        return None
    return failures[0][0], "; ".join(f"{child}: {message}" for _, child, message in failures)


def pending_error(body: dict[str, Any]) -> tuple[str, str] | None:
    """The apply/spec error that the last reconcile reported for a generation it did not finish."""
    status = body.get("status") or {}
    if status.get("observedGeneration") == body["metadata"].get("generation"):
        return None
    for cond in status.get("conditions") or []:
        if cond.get("type") == c.DEGRADED and cond.get("status") == "True" and cond.get("reason") in _SPEC_ERRORS:
            return cond["reason"], cond.get("message", "")
    return None


_SPEC_ERRORS = ("ApplyFailed", "InvalidSpec", "NameConflict", "DeleteFailed")


def api_message(exc: ApiException) -> str:
    """The API server's own reason (its Status message), else the HTTP status line."""
    try:
        return json.loads(exc.body or "{}").get("message") or f"{exc.status} {exc.reason}"
    except (ValueError, AttributeError, TypeError):
        return f"{exc.status} {exc.reason}"
