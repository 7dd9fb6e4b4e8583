"""Observed children -> conditions: Ready only when both are available; Degraded with the reason."""

import pytest

from ragengine_operator.manifests.labels import Owner
from ragengine_operator.reconcile.status import Observed, compute_status, stamp
from ragengine_operator.reconcile.workloads import workload_state
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("ns", "rag", "uid")
MODEL = RAGEngineSpec.model_validate({"inference": {"model": "m"}})


def dep(replicas=1, available=1, updated=1, total=None, gen=1, observed=1, conditions=()):
    return {
        "metadata": {"name": "d", "generation": gen},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": observed, "availableReplicas": available, "updatedReplicas": updated,
                   "replicas": replicas if total is None else total, "conditions": list(conditions)},
    }


def conds(spec, deployments, pods=None, error=None, old=()):
    status, changes = compute_status(OWNER, spec, 3, Observed(deployments, pods or {}), list(old), "T1", error)
    return {x["type"]: x for x in status["conditions"]}, status, changes


def test_ready_when_both_available():
    c, status, changes = conds(MODEL, {"inference": dep(), "engine": dep()})
    assert c["Ready"]["status"] == "True" and c["Degraded"]["status"] == "False"
    assert c["Progressing"]["status"] == "False"
    assert status["observedGeneration"] == 3 and status["endpoint"] == "http://rag.ns.svc.cluster.local"
    assert status["model"] == "m" and status["inferenceUrl"].startswith("http://rag-inference.ns.svc")
    assert len(changes) == 6
    assert c["SecureDefaults"]["status"] == "True"
    assert status["apiKeySecretRef"] == {"name": "rag-api-key", "key": "api-key"}  # what clients read
    assert all(x["reason"] and x["message"] and x["lastTransitionTime"] == "T1" for x in c.values())


def test_not_ready_while_inference_rolls():
    c, _, _ = conds(MODEL, {"inference": dep(available=0), "engine": dep()})
    assert c["Ready"]["status"] == "False" and c["InferenceReady"]["reason"] == "RollingOut"
    assert c["Progressing"]["status"] == "True" and c["EngineReady"]["status"] == "True"


def test_old_replicas_still_running_is_progressing():
    state = workload_state("engine", dep(total=2), [])
    assert state.state == "Progressing"
    assert workload_state("engine", dep(gen=2, observed=1), []).reason == "RolloutPending"
    assert workload_state("engine", None, []).reason == "Creating"


def test_degraded_on_deadline_and_unschedulable():
    stuck = dep(available=0, conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                          "message": "too slow"}])
    c, _, _ = conds(MODEL, {"inference": stuck, "engine": dep()})
    assert c["Degraded"]["status"] == "True" and c["Degraded"]["reason"] == "ProgressDeadlineExceeded"
    pod = {"metadata": {"name": "p"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/4 nodes: Insufficient nvidia.com/gpu"}]}}
    c, _, _ = conds(MODEL, {"inference": dep(available=0), "engine": dep()}, pods={"inference": [pod]})
    assert c["Degraded"]["reason"] == "Unschedulable" and "nvidia.com/gpu" in c["Degraded"]["message"]
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "Unschedulable"


def test_a_faiss_roll_stalled_on_a_full_node_says_why_and_that_the_old_pod_serves():
    """Issue 48: a FAISS engine's new pod must start on its old pod's node; with no room there the roll waits."""
    serving = {"metadata": {"name": "old"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    surge = {"metadata": {"name": "new"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match pod affinity rules"}]}}
    rolling = dep(updated=0, total=2)
    c, _, _ = conds(RAGEngineSpec(), {"engine": rolling}, pods={"engine": [serving, surge]})
    message = c["EngineReady"]["message"]
    assert c["EngineReady"]["reason"] == "Unschedulable" and "Insufficient memory" in message
    assert "starts on the node of the pod it replaces" in message and "the old pod serves meanwhile" in message
    c, _, _ = conds(RAGEngineSpec(), {"engine": dep(available=0)}, pods={"engine": [surge]})  # nothing serves: no roll
    assert "the old pod serves" not in c["EngineReady"]["message"]
    postgres = RAGEngineSpec.model_validate(
        {"storage": {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}}}})
    c, _, _ = conds(postgres, {"engine": rolling}, pods={"engine": [serving, surge]})
    assert "the old pod serves" not in c["EngineReady"]["message"]


def test_url_and_retrieval_only_need_no_vllm():
    url = RAGEngineSpec.model_validate({"inference": {"url": "http://x/v1"}})
    c, _, _ = conds(url, {"engine": dep()})
    assert c["Ready"]["status"] == "True" and c["InferenceReady"]["reason"] == "ExternalEndpoint"
    c, status, _ = conds(RAGEngineSpec(), {"engine": dep()})
    assert c["InferenceReady"]["reason"] == "NotRequired" and status["inferenceUrl"] is None


def test_apply_error_and_invalid_spec():
    c, _, _ = conds(MODEL, {"inference": dep(), "engine": dep()}, error=("ApplyFailed", "quota exceeded"))
    assert c["Ready"]["status"] == "False" and c["Degraded"]["reason"] == "ApplyFailed"
    c, _, _ = conds(None, {}, error=("InvalidSpec", "spec.x: bad"))
    assert c["Degraded"]["status"] == "True" and c["Ready"]["message"] == "spec.x: bad"


def test_transition_time_kept_while_status_unchanged():
    first, _, _ = conds(MODEL, {"inference": dep(), "engine": dep()})
    old = list(first.values())
    new = stamp([{**x, "message": "changed"} for x in old], old, "T2", 4)
    assert all(x["lastTransitionTime"] == "T1" and x["observedGeneration"] == 4 for x in new)
    _, _, changes = conds(MODEL, {"inference": dep(available=0), "engine": dep()}, old=old)
    assert {x["type"] for x in changes} == {"Ready", "InferenceReady", "Progressing"}


# --- a child's event never hides a refused apply -------------------------------------------------
@pytest.mark.parametrize("reason", ["ApplyFailed", "AccessInvalid", "NameConflict", "DeleteFailed", "InvalidSpec",
                                    "PolicyViolation"])
def test_pending_error_is_kept_until_that_generation_reconciles(reason):
    """AccessInvalid was not kept: a child's event cleared Degraded while refused access rules stood, and CI's
    test_access went on before the reconcile that wrote the Secret (it then found the rules a step behind)."""
    from ragengine_operator.reconcile.status import pending_error

    degraded = {"type": "Degraded", "status": "True", "reason": reason, "message": "pvc is forbidden"}
    body = {"metadata": {"generation": 3}, "status": {"observedGeneration": 2, "conditions": [degraded]}}
    assert pending_error(body) == (reason, "pvc is forbidden")
    reconciled = {"metadata": {"generation": 3}, "status": {"observedGeneration": 3, "conditions": [degraded]}}
    assert pending_error(reconciled) is None
    child_trouble = dict(degraded, reason="InferenceUnavailable")
    other = {"metadata": {"generation": 3}, "status": {"observedGeneration": 2, "conditions": [child_trouble]}}
    assert pending_error(other) is None


def test_scaled_to_zero_inference_and_scale_status():
    zero = RAGEngineSpec.model_validate({"inference": {"model": "m", "replicas": 0}})
    c, status, _ = conds(zero, {"inference": dep(replicas=0, available=0, updated=0), "engine": dep()})
    # on purpose, and the engine serves without it (retrieval, extractive answers): a state reached
    assert c["InferenceReady"]["reason"] == "ScaledToZero" and c["InferenceReady"]["status"] == "False"
    assert c["Ready"]["status"] == "True" and c["Ready"]["reason"] == "ScaledToZero"
    assert c["Degraded"]["status"] == "False"
    _, status, _ = conds(MODEL, {"inference": {**dep(), "status": {**dep()["status"], "readyReplicas": 1}}, "engine": dep()})
    assert status["inferenceReplicas"] == 1
    assert status["inferenceSelector"] == "ragengine.io/ragengine=rag,ragengine.io/component=inference"


def test_engine_not_ready_carries_the_engines_reason():
    spec = RAGEngineSpec.model_validate({})
    obs = Observed({"engine": dep(available=0)}, {}, engine_not_ready="the index store did not answer within 2 s")
    status, _ = compute_status(OWNER, spec, 3, obs, [], "T1")
    c = {x["type"]: x for x in status["conditions"]}
    assert c["EngineReady"]["status"] == "False" and c["EngineReady"]["reason"] == "EngineNotReady"
    assert "index store did not answer" in c["EngineReady"]["message"] and c["Ready"]["reason"] == "EngineNotReady"
    assert c["Degraded"]["status"] == "False"  # a dependency outage is not the RAGEngine's failure


def _pod(ready: bool, restarts: int, last: dict | None, now: dict | None = None) -> dict:
    status = {"name": "engine", "ready": ready, "restartCount": restarts, "state": now or {"running": {}},
              "lastState": {"terminated": last} if last else {}}
    return {"metadata": {"name": "rag-engine-abc"}, "status": {"containerStatuses": [status]}}


def test_a_restarted_container_is_reported_as_restarting_not_rolling_out():
    # Seen on the real node: kill -9 of the engine's process said "RollingOut: 0/1 available, 1/1 updated".
    killed = _pod(False, 1, {"reason": "Error", "exitCode": 137})
    spec = RAGEngineSpec.model_validate({})
    obs = Observed({"engine": dep(available=0)}, {"engine": [killed]}, engine_not_ready="embeddings: loading")
    status, _ = compute_status(OWNER, spec, 3, obs, [], "T1")
    c = {x["type"]: x for x in status["conditions"]}
    assert c["EngineReady"]["reason"] == "Restarting" and c["Ready"]["reason"] == "Restarting"
    assert c["EngineReady"]["message"] == ("engine: 0/1 available, pod rag-engine-abc container engine restarted "
                                           "(restart 1; last termination: Error, exit code 137)")
    assert c["Degraded"]["status"] == "False"  # the kubelet is already fixing it
    # once ready again, or during a rollout (not all replicas updated), it is not a restart
    assert workload_state("engine", dep(), [_pod(True, 1, {"reason": "Error", "exitCode": 137})]).reason \
        == "DeploymentAvailable"
    assert workload_state("engine", dep(available=0, updated=0), [killed]).reason == "RollingOut"
    # the moment after the kill, before the kubelet restarted it: the current state is the termination
    just_killed = _pod(False, 0, None, {"terminated": {"reason": "Error", "exitCode": 137}})
    assert workload_state("engine", dep(available=0), [just_killed]).message == (
        "engine: 0/1 available, pod rag-engine-abc container engine restarted (restart 0; last termination: Error, "
        "exit code 137)")


def test_a_deleted_pods_ended_container_is_not_reported_as_the_restart():
    # Seen on the real node: a pod deleted just before another's engine was killed -9 made the status say
    # "pod <deleted> ... restarted (restart 0; last termination: Completed, exit code 0)", not the kill.
    deleted = _pod(False, 0, None, {"terminated": {"reason": "Completed", "exitCode": 0}})
    deleted["metadata"] = {"name": "rag-engine-old", "deletionTimestamp": "2026-11-29T03:50:00Z"}
    killed = _pod(False, 1, {"reason": "Error", "exitCode": 137})
    state = workload_state("engine", dep(available=0), [deleted, killed])
    assert state.reason == "Restarting"
    assert state.message == ("engine: 0/1 available, pod rag-engine-abc container engine restarted "
                             "(restart 1; last termination: Error, exit code 137)")
    # alone, it is the deletion on its way, not a restart
    assert workload_state("engine", dep(available=0), [deleted]).reason != "Restarting"


def test_secure_defaults_warns_when_a_spec_opts_out():
    """Issue 22, finding 5: opting out of the API key or of the engine NetworkPolicy is said, with what it
    exposes, in SecureDefaults=False (never Ready: the engine still serves)."""
    def secure(spec):
        c, status, _ = conds(RAGEngineSpec.model_validate(spec), {"engine": dep()})
        assert c["Ready"]["status"] == "True"
        return c["SecureDefaults"], status

    cond, status = secure({"auth": {"enabled": False}})
    assert (cond["status"], cond["reason"]) == ("False", "AuthDisabled") and "without a key" in cond["message"]
    assert status["apiKeySecretRef"] is None
    cond, _ = secure({"engine": {"networkPolicy": {"enabled": False}}})
    assert (cond["status"], cond["reason"]) == ("False", "NetworkPolicyDisabled") and "every pod" in cond["message"]
    cond, _ = secure({"auth": {"enabled": False}, "engine": {"networkPolicy": {"enabled": False}}})
    assert cond["reason"] == "AuthAndNetworkPolicyDisabled"
    cond, status = secure({"auth": {"apiKeySecretRef": {"name": "mine", "key": "k"}}})
    assert cond["status"] == "True" and status["apiKeySecretRef"] == {"name": "mine", "key": "k"}


def test_vllm_running_unready_names_the_pod_and_leaves_the_engine_ready():
    """A vLLM pod loading its model (or failing /health): InferenceReady=False with the pod and why,
    EngineReady stays True (the engine's readiness does not follow the LLM), nothing is Degraded."""
    pod = {"metadata": {"name": "rag-inference-7d9f-x2"}, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]}}
    c, _, _ = conds(MODEL, {"inference": dep(available=0), "engine": dep()}, pods={"inference": [pod]})
    assert c["InferenceReady"]["status"] == "False" and c["InferenceReady"]["reason"] == "InferenceNotReady"
    assert "rag-inference-7d9f-x2" in c["InferenceReady"]["message"] and "extractive" in c["InferenceReady"]["message"]
    assert c["EngineReady"]["status"] == "True" and c["Degraded"]["status"] == "False"
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "InferenceNotReady"


def _health(target: str, indexes: dict) -> dict:
    return {"status": "Healthy", "embedding": {"target": target}, "indexes": indexes}


def test_reindexing_is_reported_and_never_takes_ready_away():
    from ragengine_operator.manifests.engine_env import target_digest

    spec = RAGEngineSpec.model_validate({"embedding": {"local": {"model": "wordllama:l2_supercat"}}})
    deployments = {"engine": dep()}

    def status_with(health=None, error=None, old=(), previous=None):
        observed = Observed(deployments, {}, engine_health=health, engine_health_error=error,
                            previous_embedding=previous)
        status, _ = compute_status(OWNER, spec, 3, observed, list(old), "T1")
        return {x["type"]: x for x in status["conditions"]}, status

    old_model = _health("another-digest", {"kb": {"version": 1, "current": True, "documents": 10}})
    c, status = status_with(old_model)
    assert (c["Reindexing"]["status"], c["Reindexing"]["reason"]) == ("True", "Pending")
    assert c["Ready"]["status"] == "True"
    running = _health(target_digest(spec), {
        "kb": {"version": 1, "current": False, "documents": 10,
               "reindex": {"kind": "reindex", "version": 2, "documents_done": 4, "documents_total": 10}},
        "notes": {"version": 3, "current": True, "documents": 2}})
    c, status = status_with(running)
    assert (c["Reindexing"]["status"], c["Reindexing"]["reason"]) == ("True", "Reindexing")
    assert "index kb: version 2, 4 of 10 documents" in c["Reindexing"]["message"]
    assert c["Ready"]["status"] == "True"
    assert status["indexes"][0] == {"name": "kb", "version": 1, "current": False, "documents": 10, "reindexVersion": 2,
                                    "documentsDone": 4, "documentsTotal": 10}
    assert status["embeddingTarget"] == target_digest(spec)
    done = _health(target_digest(spec), {"kb": {"version": 2, "current": True, "documents": 10}})
    c, status = status_with(done)
    assert (c["Reindexing"]["status"], c["Reindexing"]["reason"]) == ("False", "Current")
    stale = _health(target_digest(spec), {"kb": {"version": 1, "current": False, "documents": 10}})
    assert status_with(stale)[0]["Reindexing"]["reason"] == "NotCurrent"
    # Not asked this time: the last word stands (no flapping), and status.indexes too.
    kept, status = status_with(None, old=list(c.values()), previous=target_digest(spec))
    assert kept["Reindexing"]["reason"] == "Current" and kept["Reindexing"]["lastTransitionTime"] == "T1"
    # Asked and unreachable while a change is pending: Unknown, saying why.
    c, _ = status_with(None, error="GET http://x/health failed: ConnectTimeout", previous="another-digest")
    assert (c["Reindexing"]["status"], c["Reindexing"]["reason"]) == ("Unknown", "EngineUnreachable")
    assert c["Ready"]["status"] == "True"


def test_an_unreachable_external_llm_is_degraded_while_the_engine_stays_ready():
    # Seen on the real node: with the LLM down, Argo CD's health check (docs/operator.md) said Progressing.
    spec = RAGEngineSpec.model_validate({"inference": {"url": "http://llm.example/v1"}})
    obs = Observed({"engine": dep()}, {}, inference_unreachable="inference URL http://llm.example/v1 is unreachable")
    status, _ = compute_status(OWNER, spec, 3, obs, [], "T1")
    c = {x["type"]: x for x in status["conditions"]}
    assert (c["InferenceReady"]["status"], c["EngineReady"]["status"]) == ("False", "True")
    assert (c["Degraded"]["status"], c["Degraded"]["reason"]) == ("True", "InferenceUnreachable")
    assert c["Degraded"]["message"] == ("inference URL http://llm.example/v1 is unreachable; the engine still answers "
                                        "retrieval, and chat extractively")
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", "InferenceUnreachable")


GUARDED = RAGEngineSpec.model_validate({"inference": {"url": "http://llm.example/v1"}, "guardrails": {"enabled": True}})
OWN_POLICY = RAGEngineSpec.model_validate({"inference": {"url": "http://llm.example/v1"},
                                           "guardrails": {"enabled": True, "configMapRef": {"name": "team-policy"}}})


def policy_status(spec, text):
    status, _ = compute_status(OWNER, spec, 3, Observed({"engine": dep()}, {}, guardrails_policy=text), [], "T1")
    return {x["type"]: x for x in status["conditions"]}


def test_guardrails_policy_condition_says_what_the_engine_does_with_the_configmap():
    c = policy_status(GUARDED, "action: block\nscanners:\n  - type: secrets\n  - type: sensitive\n    action: redact\n")
    assert (c["GuardrailsPolicy"]["status"], c["GuardrailsPolicy"]["reason"]) == ("True", "PolicyLoaded")
    assert c["GuardrailsPolicy"]["message"] == ("ConfigMap rag-guardrails key guardrails.yaml: 2 scanners (secrets, "
                                                "sensitive), default action block")
    assert c["Degraded"]["status"] == "False" and c["Ready"]["status"] == "True"
    # KAITO's permissive parsing: an unknown scanner is skipped, the condition lists it, nothing degrades
    c = policy_status(OWN_POLICY, "scanners:\n  - type: toxicity\n  - type: secrets\n")
    assert (c["GuardrailsPolicy"]["status"], c["GuardrailsPolicy"]["reason"]) == ("True", "PolicyLoadedWithWarnings")
    assert c["GuardrailsPolicy"]["message"] == ("ConfigMap team-policy key guardrails.yaml: 1 scanners (secrets), "
                                                "default action redact; skipped: scanners[0]: unknown scanner type "
                                                "'toxicity' skipped")
    assert c["Degraded"]["status"] == "False"


def test_an_invalid_or_missing_policy_is_degraded_and_says_what_the_engine_does_instead():
    c = policy_status(OWN_POLICY, "scanners: [unclosed")
    assert (c["GuardrailsPolicy"]["status"], c["GuardrailsPolicy"]["reason"]) == ("False", "PolicyInvalid")
    assert c["GuardrailsPolicy"]["message"].startswith("ConfigMap team-policy key guardrails.yaml: not valid YAML: ")
    assert c["GuardrailsPolicy"]["message"].endswith("The engine keeps its last good policy; an engine that never "
                                                     "had one is fail-closed: answers are refused with 503")
    assert (c["Degraded"]["status"], c["Degraded"]["reason"]) == ("True", "GuardrailsPolicyInvalid")
    assert c["Ready"]["status"] == "True"  # the engine still serves, on its last good policy
    c = policy_status(OWN_POLICY, "- a list\n")
    assert c["GuardrailsPolicy"]["message"].startswith("ConfigMap team-policy key guardrails.yaml: the top level must "
                                                       "be a mapping")
    c = policy_status(OWN_POLICY, None)
    assert (c["GuardrailsPolicy"]["status"], c["GuardrailsPolicy"]["reason"]) == ("False", "PolicyNotFound")
    assert c["GuardrailsPolicy"]["message"] == "ConfigMap team-policy key guardrails.yaml does not exist"
    assert (c["Degraded"]["status"], c["Degraded"]["reason"]) == ("True", "GuardrailsPolicyNotFound")
    # without guardrails there is no condition at all
    assert "GuardrailsPolicy" not in policy_status(RAGEngineSpec.model_validate({"inference": {"url": "http://x/v1"}}),
                                                   None)
