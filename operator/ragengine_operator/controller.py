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

import base64
import contextvars
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
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from pydantic import ValidationError

from ragengine.validation import validation_message

from . import constants as c
from . import metrics
from .kube import apply as kube
from .kube.apply import api_message
from .kube.bindings import sweep_bindings
from .kube.client import api_audiences
from .kube.observe import engine_health, observe, probe_egress
from .manifests.access import (
    AccessInputError,
    access_secret,
    access_secret_name,
    audience_refusal,
    render_access,
)
from .manifests.engine import embedding_configmap_name, endpoint
from .manifests.engine_env import embedding_generation, generated_key_refs, target_digest
from .manifests.guardrails import default_policy
from .manifests.labels import Owner, secret_digest
from .manifests.status_key import status_key
from .reconcile.evaluation import events as evaluation_events
from .reconcile.plan import OPTIONAL_APIS, generated_key_secret, name_conflict, plan, referenced_secrets
from .reconcile.policy import POLICY_VIOLATION, Policy, refusals
from .reconcile.schedule import next_due
from .reconcile.status import ACCESS_INVALID, compute_status, degraded_by, pending_error
from .settings import OperatorSettings
from .spec import RAGEngineSpec

log = logging.getLogger(__name__)
CLUSTER_SCOPED = frozenset({"ClusterRoleBinding"})  # what the plan may delete outside the RAGEngine's namespace
STATUS_KEYS = ("observedGeneration", "conditions", "endpoint", "inferenceUrl", "model", "inferenceReplicas",
               "inferenceSelector", "dataVolumeSize", "modelCacheVolumeSize", "apiKeySecretRef", "indexes",
               "embeddingTarget", "evaluation")


def spec_error(exc: ValidationError) -> str:
    """The InvalidSpec condition's message: every error (a status is the one place the user reads why, and the
    API server's schema refuses most bad fields first, so what reaches here is a few cross-field rules)."""
    return validation_message(exc, within="spec", limit=None)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def child_id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']} {obj['metadata']['name']}"


class Controller:
    def __init__(self, api: k8s.ApiClient, settings: OperatorSettings) -> None:
        self.api = api
        self.dyn = DynamicClient(api)
        self.settings = settings
        self.policy = Policy.from_settings(settings)
        self._locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._applies = 0
        # Backoff and resync bookkeeping, per RAGEngine (in memory: a restart resyncs everything).
        self.failures: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.due: dict[tuple[str, str], float] = {}
        # kopf.event() finds kopf's event queue through context variables that kopf sets only for
        # its handlers: the resync loop runs its reconciles in a copy of a handler's context.
        self.kopf_context: contextvars.Context | None = None
        self._served: dict[str, tuple[float, frozenset[str]]] = {}  # add-on group version -> (when, kinds)
        self._api_audiences: frozenset[str] | None = None

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
                     cluster_domain=s.cluster_domain,
                     status_key_secret=s.status_key_secret.get_secret_value() if s.status_key_secret else "")

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
            refused = self.refused(spec)
            if refused:  # nothing applied: the children keep what they had; reported until the spec changes
                self._write_status(body, owner, spec, refused, advance=True)
                self._schedule(key, failed=False)
                return
            failures = self._apply_children(owner, spec, body["metadata"].get("generation"))
            error = degraded_by(failures)
            self._write_status(body, owner, spec, error, advance=error is None)
            self._schedule(key, failed=error is not None)
            if error:
                metrics.RECONCILE_ERRORS.labels(reason=error[0]).inc()

    def _apply_children(self, owner: Owner, spec: RAGEngineSpec, generation: int | None = None) -> list[tuple[str, str, str]]:
        """-> [(reason, child, message)] for each child not brought to its desired state."""
        failures = self._ensure_generated_keys(owner, spec)
        if spec.access is not None:
            failure = self._apply_access(owner, spec)
            if failure:
                failures.append(failure)
        desired = plan(owner, spec, self._secret_digests(owner, spec),
                       default_policy(self.settings.default_guardrails_policy) if spec.guardrails.enabled else None,
                       self._embedding_generation(owner, spec, generation))
        for obj in desired.apply:
            if obj["apiVersion"] in OPTIONAL_APIS and not self.served(obj["apiVersion"], obj["kind"]):
                failures.append(("ApplyFailed", child_id(obj), f"the API server does not serve {obj['apiVersion']} "
                                 f"{obj['kind']}: install its CRD (the Prometheus operator, KEDA) or change the spec"))
                continue
            try:
                existing = kube.get(self.dyn, obj["apiVersion"], obj["kind"], owner.namespace, obj["metadata"]["name"])
                conflict = name_conflict(existing, owner)
                if conflict:
                    failures.append(("NameConflict", child_id(obj), conflict))
                    continue
                self._apply(obj)
            except ApiException as exc:
                failures.append(("ApplyFailed", child_id(obj), api_message(exc)))
            except ResourceNotFoundError:
                failures.append(("ApplyFailed", child_id(obj), f"the API server does not serve {obj['apiVersion']} "
                                 f"{obj['kind']}"))
        for ref in desired.delete:
            if ref.optional and not self.served(ref.api_version, ref.kind):
                continue  # the cluster has no such kind, so no such object
            try:
                existing = kube.get(self.dyn, ref.api_version, ref.kind, owner.namespace, ref.name)
                if existing is not None and name_conflict(existing, owner) is None:
                    # uid precondition: never the object someone re-created since we looked
                    kube.delete(self.dyn, ref.api_version, ref.kind, owner.namespace, ref.name,
                                uid=existing["metadata"]["uid"], propagation=ref.propagation)
            except ApiException as exc:
                if exc.status == 403 and ref.kind in CLUSTER_SCOPED:
                    continue  # an operator without cluster-wide rights (rbac.tokenReview: false) made none
                failures.append(("DeleteFailed", f"{ref.kind} {ref.name}", api_message(exc)))
            except ResourceNotFoundError:
                continue  # the kind went away since served() looked: nothing of it to delete
        return failures

    def _embedding_generation(self, owner: Owner, spec: RAGEngineSpec, generation: int | None) -> int | None:
        """The generation the engine's embedding file keeps while spec.embedding does not change."""
        try:
            current = kube.get(self.dyn, "v1", "ConfigMap", owner.namespace, embedding_configmap_name(owner))
        except ApiException as exc:
            log.info("cannot read the embedding ConfigMap of %s/%s: %s", owner.namespace, owner.name, api_message(exc))
            current = None
        return embedding_generation(current, spec, generation)

    def served(self, api_version: str, kind: str) -> bool:
        """Whether an add-on kind is served, asked at most every settings.addon_recheck_seconds (a CRD
        installed later is found within that); an error reading it counts as served, so the apply reports it."""
        now_s = time.monotonic()
        hit = self._served.get(api_version)
        if hit is None or now_s - hit[0] > self.settings.addon_recheck_seconds:
            try:
                kinds = kube.served_kinds(self.dyn, api_version)
            except ApiException as exc:
                log.info("cannot tell what %s serves: %s", api_version, api_message(exc))
                return True
            hit = self._served[api_version] = (now_s, kinds)
        return kind in hit[1]

    def _secret_digests(self, owner: Owner, spec: RAGEngineSpec) -> dict[str, str]:
        """The version (uid/resourceVersion, read as metadata only) of each Secret the pods read: a
        rotated key changes the pod template, so the pods that read it restart and pick it up (env
        from a Secret is read only at container start)."""
        out = {}
        for name in sorted(referenced_secrets(owner, spec)):
            try:
                out[name] = secret_digest(kube.get_metadata(self.dyn, "v1", "Secret", owner.namespace, name))
            except ApiException as exc:  # no read access: no rotation tracking for it, nothing else breaks
                log.info("cannot read Secret %s/%s: %s", owner.namespace, name, api_message(exc))
        return out

    def _ensure_generated_keys(self, owner: Owner, spec: RAGEngineSpec) -> list[tuple[str, str, str]]:
        """Create each operator-generated key Secret once (vLLM's in model mode, the engine's when auth
        names no Secret), with a random key; never re-applied, so a key never rotates under its readers.
        Delete the Secret to rotate: the next reconcile makes a new one (and rolls the pods that read it).
        Only metadata is read: whether it exists and who controls it."""
        failures = []
        for ref in generated_key_refs(owner, spec):
            try:
                existing = kube.get_metadata(self.dyn, "v1", "Secret", owner.namespace, ref.name)
                conflict = name_conflict(existing, owner)
                if conflict:
                    failures.append(("NameConflict", f"Secret {ref.name}", conflict))
                elif existing is None:
                    self._apply(generated_key_secret(owner, ref, secrets.token_urlsafe(32)))
            except ApiException as exc:
                failures.append(("ApplyFailed", f"Secret {ref.name}", api_message(exc)))
        return failures

    def refused(self, spec: RAGEngineSpec) -> tuple[str, str] | None:
        """(PolicyViolation, what) when the operator's policy refuses fields of the spec (reconcile/policy.py)."""
        found = refusals(spec, self.policy)
        return (POLICY_VIOLATION, "; ".join(found)) if found else None

    def _apply_access(self, owner: Owner, spec: RAGEngineSpec) -> tuple[str, str, str] | None:
        """Render spec.access into the engine's access file and apply its Secret. When a key Secret or a
        ServiceAccount's namespace is missing, or the rules are unusable, the Secret is left as it was: the
        engines keep the previous rules (nothing opens up) and Degraded says why."""
        access = spec.access
        assert access is not None
        name = access_secret_name(owner)
        try:
            keys: dict[tuple[str, str], str] = {}
            for k in access.keys:
                ref = k.key_secret_ref
                secret = kube.get(self.dyn, "v1", "Secret", owner.namespace, ref.name)
                raw = ((secret or {}).get("data") or {}).get(ref.key)
                if raw is None:
                    what = "does not exist" if secret is None else f"has no key {ref.key!r}"
                    raise AccessInputError(f"access.keys {k.name!r}: Secret {ref.name} {what}")
                keys[(ref.name, ref.key)] = base64.b64decode(raw).decode("utf-8", "replace").strip()
            for ns in sorted({a.namespace for a in access.service_accounts}):
                if kube.get(self.dyn, "v1", "Namespace", None, ns) is None:
                    raise AccessInputError(f"access.serviceAccounts: namespace {ns!r} does not exist")
            refused = audience_refusal(owner, access, self.api_audiences()) if access.service_accounts else None
            if refused:
                raise AccessInputError(refused)
            text = render_access(owner, access, keys)
            existing = kube.get(self.dyn, "v1", "Secret", owner.namespace, name)
            conflict = name_conflict(existing, owner)
            if conflict:
                return "NameConflict", f"Secret {name}", conflict
            self._apply(access_secret(owner, text))
        except AccessInputError as exc:
            return ACCESS_INVALID, f"Secret {name}", f"{exc} (the engines keep the previous access rules)"
        except ApiException as exc:
            return "ApplyFailed", f"Secret {name}", api_message(exc)
        return None

    def api_audiences(self) -> frozenset[str]:
        """The API server's own audiences (kube/client.py), kept once the issuer was read."""
        if self._api_audiences is None:
            found, complete = api_audiences(self.dyn)
            if not complete:
                return found
            self._api_audiences = found
        return self._api_audiences

    def sweep_bindings(self) -> int:
        """The TokenReview bindings of deleted RAGEngines, and those under an earlier release's name (kube/bindings.py)."""
        return sweep_bindings(self.dyn)

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
            self._write_status(body, self.owner(body), spec, pending_error(body) or self.refused(spec), advance=False)

    def engine_url(self, owner: Owner) -> str:
        """The engine as the operator reaches it: settings.engine_url, else its Service (docs/versions.md)."""
        template = self.settings.engine_url
        return template.format(name=owner.name, namespace=owner.namespace) if template else endpoint(owner)

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
                           probe_engine=self.settings.probe_engine_readiness, egress=probe_egress(self.settings))
        observed.sources = current.get("sources")
        observed.previous_indexes, observed.previous_embedding = current.get("indexes"), current.get("embeddingTarget")
        observed.previous_evaluation = current.get("evaluation")
        if spec is not None and self.settings.probe_engine_indexes and (advance or asks_engine(spec, current)):
            observed.engine_health, observed.engine_health_error = engine_health(self.engine_url(owner), status_key(owner))
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
        if self.settings.post_events and spec is not None:
            rejected_before = {i.get("name"): i.get("rejectedVersion") for i in current.get("indexes") or []}
            for kind, reason, message in evaluation_events(spec, current, status, observed.engine_health,
                                                           rejected_before):
                post(body, kind, reason, message)
        if self.settings.post_events:
            # Ready and Degraded carry the story (kubectl describe); the component conditions'
            # transitions are in status and would triple the Event writes at scale.
            for cond in changes:
                if cond["type"] in (c.READY, c.DEGRADED, c.SECURE_DEFAULTS):
                    post_event(body, cond)


def asks_engine(spec: RAGEngineSpec, status: dict[str, Any]) -> bool:
    """Whether a status update from a child's event asks the engine how its indexes stand: while a change of
    model is pending or re-indexing (a reconcile, on a spec change or the resync period, always asks)."""
    cond = next((x for x in status.get("conditions") or [] if x.get("type") == c.REINDEXING), None)
    return (cond is None or cond.get("status") != "False" or status.get("embeddingTarget") != target_digest(spec)
            or spec.evaluation is not None)  # scheduled runs and gated re-indexes report through /health


def post_event(body: dict, cond: dict[str, Any]) -> None:
    """One Event per transition or distinct failure, through kopf's own poster (batched, retried)."""
    bad = (cond["type"] == c.DEGRADED and cond["status"] == "True") or (
        cond["type"] == c.SECURE_DEFAULTS and cond["status"] == "False")
    post(body, "Warning" if bad else "Normal", cond["reason"], f"{cond['type']}={cond['status']}: {cond['message']}")


def post(body: Any, kind: str, reason: str, message: str) -> None:
    """An Event through kopf's poster; outside a running operator (unit tests) there is none."""
    try:
        kopf.event(body, type=kind, reason=reason, message=message[:1024])
    except LookupError:
        log.debug("no kopf poster: event %s not posted", reason)
