"""Issue 8 on the real control plane: an external vector store makes the engine a stateless,
scalable Deployment (no data PVC, a PDB, rolling with maxUnavailable 0), and an HPA owns its
replicas when engine.autoscaling is set. faiss with 2 replicas is refused by the API server."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from ragengine.settings import EngineSettings

from .kube import wait_for

POSTGRES = {"storage": {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db", "key": "dsn"}}},
            "engine": {"replicas": 3}}


def test_postgres_with_three_replicas(kube, namespace):
    ns, n = namespace, "pg"
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "db"}, "stringData": {"dsn": "postgresql://u:p@db/rag"}})
    kube.create_rag(ns, n, POSTGRES)
    rag = kube.wait_ready(ns, n)
    dep = kube.deployment(ns, f"{n}-engine")
    assert dep["spec"]["replicas"] == 3 and dep["status"]["availableReplicas"] == 3
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert not any("persistentVolumeClaim" in v for v in dep["spec"]["template"]["spec"]["volumes"])
    assert not kube.exists("PersistentVolumeClaim", ns, f"{n}-data")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[EngineSettings.env_name("vector_store_url")]["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "dsn"}
    assert env[EngineSettings.env_name("vector_store")]["value"] == "postgres"
    pdb = kube.api.sanitize_for_serialization(
        __import__("kubernetes").client.PolicyV1Api(kube.api).read_namespaced_pod_disruption_budget(f"{n}-engine", ns))
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["metadata"]["ownerReferences"][0]["uid"] == rag["metadata"]["uid"]


def test_autoscaling_hands_replicas_to_the_hpa(kube, namespace):
    from kubernetes import client as k8s

    ns, n = namespace, "hpa"
    spec = {**POSTGRES, "engine": {"autoscaling": {"minReplicas": 2, "maxReplicas": 6}}}
    kube.create_rag(ns, n, spec)
    hpa = wait_for(lambda: k8s.AutoscalingV2Api(kube.api).read_namespaced_horizontal_pod_autoscaler(f"{n}-engine", ns),
                   20, "the HPA")
    assert hpa.spec.scale_target_ref.name == f"{n}-engine" and hpa.spec.max_replicas == 6
    # kube-controller-manager's HPA controller brings the Deployment into [min, max]
    wait_for(lambda: kube.deployment(ns, f"{n}-engine")["spec"]["replicas"] == 2, 60, "HPA scaled to minReplicas")
    # Scaled by someone else (the HPA on load, here kubectl): a reconcile must not revert it.
    kube.kubectl("scale", "deployment", f"{n}-engine", "-n", ns, "--replicas=4")
    kube.patch_rag(ns, n, {"spec": {"retrieval": {"contextTokenRatio": 0.3}}})
    kube.wait_ready(ns, n)
    dep = kube.deployment(ns, f"{n}-engine")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[EngineSettings.env_name("context_token_ratio")] == "0.3"  # that reconcile did apply
    assert dep["spec"]["replicas"] == 4


@pytest.mark.parametrize("engine", [{"replicas": 2}, {"autoscaling": {"maxReplicas": 3}}])
def test_faiss_with_more_than_one_replica_is_refused(kube, namespace, engine):
    with pytest.raises(ApiException) as info:
        kube.create_rag(namespace, "many", {"engine": engine})
    assert info.value.status == 422
    assert "need storage.vectorStore.type postgres or milvus" in json.loads(info.value.body)["message"]


def test_scale_subresource_frees_the_gpus(kube, namespace):
    from ragengine_operator import constants as c

    ns, n = namespace, "gpus"
    kube.create_rag(ns, n, {"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "storage": {"volume": {"size": "1Gi"}}})
    kube.wait_ready(ns, n)
    out = kube.kubectl("get", "--raw", f"/apis/{c.API_VERSION}/namespaces/{ns}/{c.PLURAL}/{n}/scale").stdout
    scale = json.loads(out)
    assert scale["spec"]["replicas"] == 1 and scale["status"]["replicas"] == 1
    assert scale["status"]["selector"] == f"{c.SELECTOR_NAME}={n},{c.SELECTOR_COMPONENT}=inference"
    kube.kubectl("scale", f"{c.SINGULAR}/{n}", "-n", ns, "--replicas=0")
    wait_for(lambda: kube.deployment(ns, f"{n}-inference")["spec"]["replicas"] == 0, 20, "vLLM scaled to 0")
    cond = wait_for(lambda: (x := kube.condition(ns, n, c.INFERENCE_READY)) and x["reason"] == "ScaledToZero" and x, 20,
                    "ScaledToZero")
    assert cond["status"] == "False" and kube.condition(ns, n, c.DEGRADED)["status"] == "False"
    # the engine serves without vLLM (retrieval, extractive answers): the RAGEngine stays Ready
    assert kube.condition(ns, n, c.ENGINE_READY)["status"] == "True"
    wait_for(lambda: kube.condition(ns, n, c.READY)["status"] == "True", 20, "Ready while scaled to zero")


def test_unready_vllm_leaves_the_engine_ready(kube, namespace):
    """kwok plays the kubelet: the vLLM pod runs but fails readiness (loading its model, /health failing).
    InferenceReady=False names the pod and why; EngineReady stays True (the engine's own readiness does
    not follow the LLM: tests/engine/test_llm_availability.py); nothing is Degraded."""
    import time

    from ragengine_operator import constants as c

    ns, n = namespace, "loading"
    kube.create_rag(ns, n, {"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "storage": {"volume": {"size": "1Gi"}}})
    kube.wait_ready(ns, n)
    (pod,) = kube.pods(ns, f"{c.SELECTOR_NAME}={n},{c.SELECTOR_COMPONENT}=inference")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"name": "vllm", "ready": False, "restartCount": 0, "image": pod.spec.containers[0].image, "imageID": "",
              "started": True, "state": {"running": {"startedAt": now}}}
    conditions = [{"type": t, "status": "False", "lastTransitionTime": now, "reason": "ContainersNotReady"}
                  for t in ("Ready", "ContainersReady")]
    kube.core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {"containerStatuses": [status],
                                                                            "conditions": conditions}})
    cond = wait_for(lambda: (x := kube.condition(ns, n, c.INFERENCE_READY)) and x["status"] == "False" and x, 30,
                    "InferenceReady=False")
    assert cond["reason"] == "InferenceNotReady" and pod.metadata.name in cond["message"], cond
    assert kube.condition(ns, n, c.ENGINE_READY)["status"] == "True"
    assert kube.condition(ns, n, c.DEGRADED)["status"] == "False"
    ready = kube.condition(ns, n, c.READY)
    assert ready["status"] == "False" and ready["reason"] == "InferenceNotReady"
    engine = kube.deployment(ns, f"{n}-engine")
    assert engine["status"]["availableReplicas"] == 1  # the engine's Service keeps its endpoint
