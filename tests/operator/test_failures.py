"""Pure parts of failure handling: container states, distinct-failure Events, backoff, ownership."""

from ragengine_operator.manifests.labels import Owner, owner_reference
from ragengine_operator.reconcile.plan import name_conflict
from ragengine_operator.reconcile.schedule import RETRY_MAX_SECONDS, backoff, next_due
from ragengine_operator.reconcile.status import degraded_by as _error
from ragengine_operator.reconcile.status import transitions
from ragengine_operator.reconcile.workloads import container_failure, workload_state

OWNER = Owner("ns", "rag", "uid-1")


def pod(waiting=None, last=None, name="p"):
    cs = {"name": "engine", "state": {"waiting": waiting} if waiting else {"running": {}}}
    if last:
        cs["lastState"] = {"terminated": last}
    return {"metadata": {"name": name}, "status": {"phase": "Running", "containerStatuses": [cs]}}


def test_container_failures_are_named_with_the_last_termination():
    assert container_failure([pod()]) is None
    assert container_failure([pod({"reason": "ContainerCreating"})]) is None
    reason, message = container_failure([pod({"reason": "CrashLoopBackOff", "message": "back-off 5m"},
                                              last={"reason": "OOMKilled", "exitCode": 137})])
    assert reason == "CrashLoopBackOff" and "OOMKilled" in message and "137" in message
    reason, message = container_failure([pod({"reason": "CreateContainerConfigError",
                                              "message": 'couldn\'t find key k in Secret ns/s'})])
    assert reason == "CreateContainerConfigError" and "Secret ns/s" in message
    assert container_failure([pod({"reason": "ContainerCreating"})], {"p": ("FailedMount", "Multi-Attach error")}) == (
        "FailedMount", "pod p: FailedMount: Multi-Attach error")


def test_a_pulling_failure_fails_the_workload_before_any_deadline():
    dep = {"metadata": {"generation": 1}, "spec": {"replicas": 1},
           "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 0}}
    state = workload_state("engine", dep, [pod({"reason": "ImagePullBackOff", "message": "not found"})])
    assert state.state == "Failed" and state.reason == "ImagePullBackOff"


def test_one_event_per_distinct_failure():
    old = [{"type": "Degraded", "status": "True", "reason": "ApplyFailed", "message": "PVC a: forbidden"}]
    same = [{"type": "Degraded", "status": "True", "reason": "ApplyFailed", "message": "PVC a: forbidden"}]
    other = [{"type": "Degraded", "status": "True", "reason": "ApplyFailed", "message": "PVC b: forbidden"}]
    assert transitions(same, old) == []
    assert transitions(other, old) == other


def test_backoff_is_exponential_and_capped():
    assert [backoff(n) for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert backoff(30) == RETRY_MAX_SECONDS
    assert next_due(100.0, 0, 300, 0.2, 0.5) == 100 + 330
    assert next_due(100.0, 2, 300, 0.2, 0.5) == 110


def test_name_conflict_by_controller_uid():
    mine = {"kind": "Service", "metadata": {"name": "x", "ownerReferences": [owner_reference(OWNER)]}}
    assert name_conflict(None, OWNER) is None and name_conflict(mine, OWNER) is None
    foreign = {"kind": "Service", "metadata": {"name": "x", "ownerReferences": [
        {**owner_reference(Owner("ns", "other", "uid-2")), "name": "other"}]}}
    assert "controlled by RAGEngine other" in name_conflict(foreign, OWNER)
    assert "not controlled" in name_conflict({"kind": "Service", "metadata": {"name": "x"}}, OWNER)


def test_degraded_names_every_refused_child():
    reason, message = _error([("ApplyFailed", "PersistentVolumeClaim rag-data", "forbidden: only dynamically provisioned"),
                              ("NameConflict", "Service rag", "exists")])
    assert reason == "ApplyFailed" and "PersistentVolumeClaim rag-data: forbidden" in message and "Service rag" in message
