"""What a workload's Deployment and pods say, as one state: Available, Progressing (with why: unschedulable, a pod
running unready) or Failed (an image that does not pull, a container in a crash loop, a mount that fails). Pure:
the reconcile's status (``status.py``) and the operator's pod watch (``handlers.py``) read pods through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AVAILABLE, PROGRESSING, FAILED = "Available", "Progressing", "Failed"


@dataclass(frozen=True)
class WorkloadState:
    state: str  # AVAILABLE | PROGRESSING | FAILED
    reason: str
    message: str


def _unschedulable(pods: list[dict[str, Any]]) -> str | None:
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
                return f"pod {pod['metadata']['name']} is unschedulable: {cond.get('message', '')}"
    return None


# Container states that will not fix themselves: report them at once, not after the progress deadline.
CONTAINER_FAILURES = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CrashLoopBackOff",
                      "CreateContainerConfigError", "CreateContainerError", "RunContainerError")


def container_failure(pods: list[dict[str, Any]], pod_events: dict[str, tuple[str, str]] | None = None,
                      ) -> tuple[str, str] | None:
    """(reason, message) of the first pod whose container is stuck in a failing state, or a mount failure."""
    for pod in pods:
        name = pod["metadata"]["name"]
        st = pod.get("status") or {}
        for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason not in CONTAINER_FAILURES:
                continue
            message = f"pod {name} container {cs.get('name')}: {reason}"
            if waiting.get("message"):
                message += f": {waiting['message']}"
            last = (cs.get("lastState") or {}).get("terminated") or {}
            if last.get("reason"):  # e.g. OOMKilled behind a CrashLoopBackOff
                message += f" (last termination: {last['reason']}, exit code {last.get('exitCode')})"
            return reason, message
        if pod_events and name in pod_events:
            reason, message = pod_events[name]
            return reason, f"pod {name}: {reason}: {message}"
    return None


def restarted_container(pods: list[dict[str, Any]]) -> str | None:
    """A pod whose container died (it is terminated now, or was and is not ready again yet; the kubelet
    restarts it in place): what ended it, so status says so rather than "rolling out". A pod being deleted is
    no restart: its container's end (Completed, after the drain) is the deletion, and its replacement is what
    to report."""
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if not ended or cs.get("ready"):
                continue
            why = ended.get("reason") or "terminated"
            return (f"pod {pod['metadata']['name']} container {cs.get('name')} restarted "
                    f"(restart {cs.get('restartCount', 0)}; last termination: {why}, exit code {ended.get('exitCode')})")
    return None


def workload_state(what: str, dep: dict[str, Any] | None, pods: list[dict[str, Any]],
                   pod_events: dict[str, tuple[str, str]] | None = None) -> WorkloadState:
    if dep is None:
        return WorkloadState(PROGRESSING, "Creating", f"{what} Deployment does not exist yet")
    want = (dep.get("spec") or {}).get("replicas", 1)
    st = dep.get("status") or {}
    conds = {x.get("type"): x for x in st.get("conditions") or []}
    prog, failure = conds.get("Progressing", {}), conds.get("ReplicaFailure", {})
    if prog.get("status") == "False" and prog.get("reason") == "ProgressDeadlineExceeded":
        return WorkloadState(FAILED, "ProgressDeadlineExceeded", f"{what}: {prog.get('message', '')}")
    if failure.get("status") == "True":
        return WorkloadState(FAILED, "ReplicaFailure", f"{what}: {failure.get('message', '')}")
    broken = container_failure(pods, pod_events)
    if broken:
        return WorkloadState(FAILED, broken[0], f"{what}: {broken[1]}")
    if st.get("observedGeneration", 0) < dep["metadata"].get("generation", 0):
        return WorkloadState(PROGRESSING, "RolloutPending", f"{what} Deployment change not yet observed")
    updated, available, total = (st.get(k, 0) for k in ("updatedReplicas", "availableReplicas", "replicas"))
    if updated >= want and available >= want and total <= want:
        return WorkloadState(AVAILABLE, "DeploymentAvailable", f"{what}: {available}/{want} replicas available")
    restarted = restarted_container(pods) if updated >= want else None
    if restarted:
        return WorkloadState(PROGRESSING, "Restarting", f"{what}: {available}/{want} available, {restarted}")
    unschedulable = _unschedulable(pods)
    if unschedulable:
        return WorkloadState(FAILED, "Unschedulable", f"{what}: {unschedulable}")
    return WorkloadState(
        PROGRESSING, "RollingOut", f"{what}: {available}/{want} available, {updated}/{want} updated"
    )


def _running_unready(pods: list[dict[str, Any]]) -> str | None:
    """The first pod that runs but fails readiness (vLLM loading its model, or its /health failing)."""
    for pod in pods:
        st = pod.get("status") or {}
        ready = {x.get("type"): x.get("status") for x in st.get("conditions") or []}.get("Ready")
        if st.get("phase") == "Running" and ready == "False":
            return pod["metadata"]["name"]
    return None


def inference_state(dep: dict[str, Any] | None, pods: list[dict[str, Any]],
                    pod_events: dict[str, tuple[str, str]] | None) -> WorkloadState:
    """vLLM's workload state; a pod that runs unready is named (InferenceNotReady): the engine keeps
    serving retrieval and extractive answers meanwhile (its readiness does not follow the LLM)."""
    s = workload_state("vLLM", dep, pods, pod_events)
    pod = _running_unready(pods) if s.state == PROGRESSING else None
    if pod is None:
        return s
    return WorkloadState(PROGRESSING, "InferenceNotReady",
                         f"{s.message}; pod {pod} runs but is not ready (loading the model, or its /health fails): "
                         "the engine answers with retrieval and extractive answers meanwhile")
