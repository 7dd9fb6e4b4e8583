"""A sync worker as a Job in the RAGEngine's namespace (``sync_mode: job``; syncer/runner.py dispatches).

The Job is manifests/sync_job.py's. Its result is the pod's termination message, read from the
operator's kopf index of sync pods (handlers.sync_pods: the pod watch it already has), so waiting
costs no API call but a read of the Job every JOB_CHECK_S (its deadline deletes the pod with it).
A Job of the same name left from before (the operator restarted mid-sync) is adopted when it runs
the same request, else replaced. The Job goes once its result is read; its TTL is the backstop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from ..kube import apply as kube
from ..kube.apply import api_message
from ..manifests.labels import Owner
from ..manifests.sync_job import REQUEST_ANNOTATION, SyncPod, sync_job
from ..reconcile.plan import name_conflict
from ..sources.protocol import Limits, Prepared, SyncRequest, failed, result_from_job, result_from_pod
from ..sources.sync import SyncResult
from ..spec import SecretKeyRef

log = logging.getLogger(__name__)
POLL_S = 0.5  # how often the Job's pod is looked up in the in-memory index
JOB_CHECK_S = 10.0  # how often the Job itself is read
PROGRESS_EVERY_S = 10.0


def finished(job: dict[str, Any]) -> bool:
    return any(x.get("type") in ("Complete", "Failed") and x.get("status") == "True"
               for x in (job.get("status") or {}).get("conditions") or [])


class JobRunner:
    def __init__(self, dyn: DynamicClient, pod: SyncPod, limits: Limits, pods: Mapping[Any, Any]) -> None:
        self.dyn, self.pod, self.limits, self.pods = dyn, pod, limits, pods

    async def run(self, owner: Owner, prepared: Prepared, progress: Callable[[str], None] | None) -> SyncResult:
        key = prepared.api_key
        job = sync_job(owner, prepared.request, self.pod, prepared.credentials,
                       SecretKeyRef(name=key[0], key=key[1]) if key else None, prepared.configmap,
                       prepared.service_account)
        started = await asyncio.to_thread(self.start, owner, job)
        if started.startswith("!"):
            return failed(prepared.request, started[1:])
        try:
            return await self.wait(job, started, prepared.request, progress)
        finally:
            await asyncio.to_thread(self.delete, job, started)

    def start(self, owner: Owner, job: dict[str, Any]) -> str:
        """Create the Job -> its uid, or "!" and why it cannot be."""
        ns, name = owner.namespace, job["metadata"]["name"]
        existing = kube.get(self.dyn, "batch/v1", "Job", ns, name)
        if existing is not None:
            conflict = name_conflict(existing, owner)
            if conflict:
                return "!" + conflict
            same = (existing["metadata"].get("annotations") or {}).get(REQUEST_ANNOTATION) == \
                job["metadata"]["annotations"][REQUEST_ANNOTATION]
            if same and not finished(existing):
                return str(existing["metadata"]["uid"])
            kube.delete(self.dyn, "batch/v1", "Job", ns, name, uid=existing["metadata"]["uid"], propagation="Background")
            deadline = time.monotonic() + 30
            while kube.get(self.dyn, "batch/v1", "Job", ns, name) is not None:
                if time.monotonic() > deadline:
                    return f"!the previous sync Job {name} is still being deleted"
                time.sleep(0.5)
        return str(kube.server_side_apply(self.dyn, job)["metadata"]["uid"])

    async def wait(self, job: dict[str, Any], uid: str, request: SyncRequest,
                   progress: Callable[[str], None] | None) -> SyncResult:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        began = time.monotonic()
        deadline = began + self.pod.deadline_seconds + 60
        checked = announced = 0.0
        complete = None  # when the Job was first seen Complete without its pod's result
        while True:
            for status in list(self.pods.get((ns, uid)) or ()):
                result = result_from_pod(status, request, self.limits)
                if result is not None:
                    return result
            now = time.monotonic()
            if now - checked >= JOB_CHECK_S or now > deadline:
                checked = now
                current = await asyncio.to_thread(kube.get, self.dyn, "batch/v1", "Job", ns, name)
                mine = current if current is not None and current["metadata"]["uid"] == uid else None
                ended = result_from_job(mine, request, self.limits)
                if ended is not None:
                    return ended
                if mine is not None and finished(mine):
                    complete = complete or now
                    if now - complete >= JOB_CHECK_S:
                        return failed(request, f"the sync Job {name} completed, but its pod's result was not seen")
                if now > deadline:
                    return failed(request, f"the sync did not finish within its deadline ({self.pod.deadline_seconds} s)")
            if progress is not None and now - began >= PROGRESS_EVERY_S and now - announced >= PROGRESS_EVERY_S:
                announced = now
                await asyncio.to_thread(progress, f"syncing in Job {name} for {int(now - began)} s")
            await asyncio.sleep(POLL_S)

    def delete(self, job: dict[str, Any], uid: str) -> None:
        try:
            kube.delete(self.dyn, "batch/v1", "Job", job["metadata"]["namespace"], job["metadata"]["name"], uid=uid,
                        propagation="Background")
        except ApiException as exc:
            if exc.status != 409:  # 409: a newer Job of that name (the uid precondition)
                log.warning("sync Job %s not deleted: %s", job["metadata"]["name"], api_message(exc))
