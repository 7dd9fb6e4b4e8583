"""Every kopf handler, each a few lines: resolve the object, call the controller.

Run with `ragengine-operator` (see __main__.py) or `kopf run -m ragengine_operator.handlers`.
No handler here needs a finalizer (no on.delete, no per-object daemon or timer): children go with
the RAGEngine through owner references, so deletion never waits for the operator. Periodic work
(resync, source syncs) runs in operator-wide loops over kopf's in-memory indexes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf
from kubernetes.client.rest import ApiException

from . import constants as c
from . import reachability
from .conversion.storage import migrate
from .kube.apply import api_message
from .kube.client import kopf_login, new_api_client
from .kube.observe import probe_egress, probe_llm
from .manifests.sync_job import JOB_UID_LABEL
from .reconcile.workloads import container_failure
from .resync import resync_loop
from .sources import traced
from .startup import configure
from .syncer.runner import SourceSyncer, Target

RAG = (c.GROUP, c.VERSION, c.PLURAL)
log = logging.getLogger(__name__)


@kopf.index(*RAG)
def ragengines(namespace: str, name: str, **_: Any) -> dict[tuple[str, str], None]:
    """The RAGEngines this operator serves, kept by kopf from its watch: the resync loop's work list."""
    return {(namespace, name): None}


@kopf.index(*RAG)
def sourced(namespace: str, name: str, uid: str, spec: kopf.Spec, status: kopf.Status, annotations: kopf.Annotations,
            **_: Any) -> dict[tuple[str, str], Target] | None:
    """RAGEngines with sources (or with status.sources left to prune): the source syncer's work list."""
    target = Target.from_body(namespace, name, uid, spec, status, annotations)
    return {(namespace, name): target} if target else None


def _sync_requested(annotations: kopf.Annotations, **_: Any) -> bool:
    return any(k == c.SYNC_NOW_ANNOTATION or k.startswith(c.SOURCE_SYNC_ANNOTATION_PREFIX) for k in annotations)


@kopf.on.event(*RAG, when=_sync_requested)
def sync_requested(memo: kopf.Memo, **_: Any) -> None:
    """A RAGEngine with a sync request (kubectl annotate, or a push through the receiver) changed: the source
    syncer looks at once instead of at its next tick (its index already holds the request)."""
    syncer = getattr(memo, "syncer", None)
    if syncer is not None:
        syncer.wake.set()


@kopf.index(*RAG)
def external_inference(namespace: str, name: str, spec: kopf.Spec, status: kopf.Status,
                       **_: Any) -> dict[tuple[str, str], tuple] | None:
    """url-mode RAGEngines, their LLM endpoint, model and recorded InferenceReady: the reachability loop's work."""
    target = reachability.target(spec, status)
    return {(namespace, name): target} if target else None


@kopf.index("", "v1", "pods", labels={c.SELECTOR_COMPONENT: c.COMPONENT_SYNC, JOB_UID_LABEL: kopf.PRESENT})
def sync_pods(namespace: str, labels: kopf.Labels, status: kopf.Status, **_: Any) -> dict[tuple[str, str], dict]:
    """Source-sync pods by their Job's uid: a sync Job's result is read here (its termination message),
    from the pod watch the operator already has, without polling the API."""
    return {(namespace, labels[JOB_UID_LABEL]): dict(status)}


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger,
                  ragengines: kopf.Index, sourced: kopf.Index, sync_pods: kopf.Index, external_inference: kopf.Index,
                  **_: Any) -> None:
    configure(settings, memo, logger)
    ours = memo.settings
    egress = probe_egress(ours)
    memo.syncer = SourceSyncer(memo.controller, sync_pods)
    memo.tasks = [
        asyncio.create_task(resync_loop(memo.controller, ragengines, ours.max_workers)),
        asyncio.create_task(memo.syncer.loop(sourced)),
        asyncio.create_task(reachability.reachability_loop(
            memo.controller, external_inference, lambda url, model: probe_llm(url, model, egress),
            ours.reachability_seconds)),
    ]
    if getattr(memo, "process", None) is not None:  # runtime.py: /healthz watches this loop tick
        memo.tasks.append(asyncio.create_task(_heartbeat(memo.process)))
    if ours.webhook_service:  # the release that owns the CRD rewrites stored objects at the storage version
        memo.tasks.append(asyncio.create_task(_migrate_storage()))


async def _heartbeat(process: Any) -> None:
    while True:
        process.kopf_beat = time.monotonic()
        await asyncio.sleep(5)


async def _migrate_storage() -> None:
    """Until it succeeds: the webhook may not answer yet right after an upgrade (its CA reaches the CRD first)."""
    delay = 2.0
    while True:
        try:
            await asyncio.to_thread(migrate, new_api_client(pool_size=2))
            return
        except Exception as exc:
            log.warning("storage version migration not done yet (retry in %.0f s): %s", delay, api_message(exc)
                        if isinstance(exc, ApiException) else exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 300.0)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.tasks:
        task.cancel()
    traced.flush()  # the source syncs' spans still buffered


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf_login(**kwargs)


# resume: re-adopt existing objects after a restart (also after a crash mid-reconcile).
@kopf.on.resume(*RAG)
@kopf.on.create(*RAG)
@kopf.on.update(*RAG)
def reconcile(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    memo.controller.remember_context()  # for the resync loop's Events
    memo.controller.reconcile(namespace, name)


def _owner(body: kopf.Body) -> str | None:
    for ref in body.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == c.KIND and ref.get("apiVersion", "").startswith(c.GROUP + "/") and ref.get("controller"):
            return ref["name"]
    return None


@kopf.on.event("apps", "v1", "deployments", labels={c.LABEL_MANAGED_BY: c.FIELD_MANAGER})
def child_deployment(event: kopf.RawEvent, body: kopf.Body, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    """A child's status moved: recompute the owner's status now (Ready within a second)."""
    owner = _owner(body)
    if owner is None:
        return
    memo.controller.remember_context()
    try:
        if event.get("type") == "DELETED":
            memo.controller.reconcile(namespace, owner)  # someone deleted it: put it back
        else:
            memo.controller.sync_status(namespace, owner)
    except ApiException as exc:  # the resync loop tries again; no traceback for a transient refusal
        log.warning("owner %s/%s not updated now: %s", namespace, owner, api_message(exc))


def _workload(value: str | None, **_: Any) -> bool:
    return value in (c.COMPONENT_ENGINE, c.COMPONENT_INFERENCE)


@kopf.on.event("", "v1", "pods", labels={c.LABEL_MANAGED_BY: c.FIELD_MANAGER, c.SELECTOR_NAME: kopf.PRESENT,
                                         c.SELECTOR_COMPONENT: _workload})
def child_pod(body: kopf.Body, labels: kopf.Labels, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    """A pod's container went into a failing state (ImagePullBackOff, CrashLoopBackOff, ...): the
    Deployment's status does not change for that, so report it from the pod itself, at once."""
    if container_failure([dict(body)]) is not None:
        try:
            memo.controller.sync_status(namespace, labels[c.SELECTOR_NAME])
        except ApiException as exc:
            log.warning("owner %s/%s not updated now: %s", namespace, labels[c.SELECTOR_NAME], api_message(exc))
