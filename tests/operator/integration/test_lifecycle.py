"""The operator against the real control plane: children, scheduling on GPU nodes, Ready, updates,
URL mode, a failure surfacing as Degraded, and garbage collection on delete."""

from __future__ import annotations

from ragengine.settings import EngineSettings
from ragengine_operator import constants as c

from .kube import wait_for

MODEL_SPEC = {
    "inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpus": 1, "contextWindow": 4096, "modelCache": {"size": "10Gi"}},
    "retrieval": {"contextTokenRatio": 0.5, "similarityThreshold": 0.1},
    "storage": {"volume": {"size": "1Gi"}},
}
CHILDREN = [
    ("PersistentVolumeClaim", "{n}-model-cache"), ("Deployment", "{n}-inference"), ("Service", "{n}-inference"),
    ("PersistentVolumeClaim", "{n}-data"), ("Deployment", "{n}-engine"), ("Service", "{n}"),
]


def env_of(dep: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}


def template_hash(dep: dict) -> str:
    return dep["spec"]["template"]["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION]


def test_model_mode_children_scheduling_and_ready(kube, namespace):
    ns, n = namespace, "rag"
    rag = kube.create_rag(ns, n, MODEL_SPEC)
    uid = rag["metadata"]["uid"]
    wait_for(lambda: all(kube.exists(k, ns, name.format(n=n)) for k, name in CHILDREN), 20, "all children")
    vllm, engine = kube.deployment(ns, f"{n}-inference"), kube.deployment(ns, f"{n}-engine")
    for dep in (vllm, engine):
        (ref,) = dep["metadata"]["ownerReferences"]
        assert ref["uid"] == uid and ref["kind"] == c.KIND and ref["controller"] is True
    ctr = vllm["spec"]["template"]["spec"]["containers"][0]
    assert ctr["args"][:4] == ["--model", "Qwen/Qwen2.5-0.5B-Instruct", "--served-model-name", "Qwen/Qwen2.5-0.5B-Instruct"]
    assert "--max-model-len" in ctr["args"] and ctr["resources"]["limits"][c.GPU_RESOURCE] == "1"
    env = env_of(engine)
    assert env[EngineSettings.env_name("llm_url")] == f"http://{n}-inference.{ns}.svc.cluster.local:8000/v1"
    assert env[EngineSettings.env_name("context_token_ratio")] == "0.5"
    assert env[EngineSettings.env_name("context_window")] == "4096"
    svc = kube.core.read_namespaced_service(n, ns)
    assert svc.spec.ports[0].port == 80 and svc.spec.ports[0].target_port == "http"
    pvc = kube.core.read_namespaced_persistent_volume_claim(f"{n}-data", ns)
    # no class named: the cluster's default (ragengine-local when the real node runs, hack/cluster.sh)
    from kubernetes import client as k8s

    default = [sc.metadata.name for sc in k8s.StorageV1Api(kube.api).list_storage_class().items
               if (sc.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"]
    assert pvc.spec.resources.requests["storage"] == "1Gi" and [pvc.spec.storage_class_name] == default

    rag = kube.wait_ready(ns, n, timeout=60)
    # vLLM only on GPU nodes (it requests nvidia.com/gpu and tolerates their taint); the engine not there.
    vllm_pods = kube.pods(ns, f"{c.SELECTOR_NAME}={n},{c.SELECTOR_COMPONENT}=inference")
    engine_pods = kube.pods(ns, f"{c.SELECTOR_NAME}={n},{c.SELECTOR_COMPONENT}=engine")
    assert vllm_pods and all(p.spec.node_name.startswith("kwok-gpu-") for p in vllm_pods)
    assert engine_pods and all(p.spec.node_name.startswith("kwok-cpu-") for p in engine_pods)
    assert all(p.status.phase == "Running" for p in vllm_pods + engine_pods)
    status = rag["status"]
    assert status["endpoint"] == f"http://{n}.{ns}.svc.cluster.local"
    assert status["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    conds = {x["type"]: x for x in status["conditions"]}
    # every condition, plus Reindexing once the operator has asked the engine how its indexes stand
    assert set(conds) - {c.REINDEXING} == set(c.CONDITION_TYPES)
    assert conds["InferenceReady"]["status"] == conds["EngineReady"]["status"] == "True"
    assert conds["Degraded"]["status"] == "False" and conds["Progressing"]["status"] == "False"
    assert all(x["reason"] and x["message"] and x["lastTransitionTime"] for x in conds.values())
    # printer columns and Events on transitions
    out = kube.kubectl("get", "rag", n, "-n", ns, "--no-headers").stdout.split()
    assert out[:3] == [n, "True", "Qwen/Qwen2.5-0.5B-Instruct"]
    events = wait_for(lambda: [e for e in kube.core.list_namespaced_event(ns).items
                               if e.involved_object.name == n and e.reason == "Available"], 10, "a Ready event")
    assert events[0].source.component == c.FIELD_MANAGER


def test_spec_update_rolls_only_the_affected_deployment(kube, namespace, llm_url):
    ns, n = namespace, "upd"
    kube.create_rag(ns, n, MODEL_SPEC)
    kube.wait_ready(ns, n)
    v0, e0 = kube.deployment(ns, f"{n}-inference"), kube.deployment(ns, f"{n}-engine")
    vllm_selector = f"{c.SELECTOR_NAME}={n},{c.SELECTOR_COMPONENT}=inference"
    vllm_pods = {p.metadata.uid for p in kube.pods(ns, vllm_selector)}

    kube.patch_rag(ns, n, {"spec": {"retrieval": {"contextTokenRatio": 0.3}}})
    wait_for(lambda: template_hash(kube.deployment(ns, f"{n}-engine")) != template_hash(e0), 20, "engine template change")
    kube.wait_ready(ns, n)
    v1, e1 = kube.deployment(ns, f"{n}-inference"), kube.deployment(ns, f"{n}-engine")
    assert env_of(e1)[EngineSettings.env_name("context_token_ratio")] == "0.3"
    assert e1["metadata"]["generation"] == e0["metadata"]["generation"] + 1
    # vLLM untouched: the same spec (its status may move: kwok writes it), and the same pods, not restarted
    assert v1["metadata"]["generation"] == v0["metadata"]["generation"] and v1["spec"] == v0["spec"]
    assert vllm_pods and {p.metadata.uid for p in kube.pods(ns, vllm_selector)} == vllm_pods

    kube.patch_rag(ns, n, {"spec": {"inference": {"image": "vllm/vllm-openai:v0.11.0"}}})
    wait_for(lambda: template_hash(kube.deployment(ns, f"{n}-inference")) != template_hash(v1), 20, "vLLM template change")
    kube.wait_ready(ns, n)
    v2, e2 = kube.deployment(ns, f"{n}-inference"), kube.deployment(ns, f"{n}-engine")
    assert v2["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.11.0"
    assert e2["metadata"]["generation"] == e1["metadata"]["generation"]  # engine untouched

    # switching to an external endpoint removes vLLM and repoints the engine
    kube.patch_rag(ns, n, {"spec": {"inference": {"model": None, "image": None, "url": llm_url}}})
    wait_for(lambda: not kube.exists("Deployment", ns, f"{n}-inference"), 20, "vLLM Deployment removed")
    rag = kube.wait_ready(ns, n)
    assert rag["status"]["inferenceUrl"] == llm_url
    assert env_of(kube.deployment(ns, f"{n}-engine"))[EngineSettings.env_name("llm_url")] == llm_url


def test_url_mode_creates_no_vllm(kube, namespace, llm_url):
    ns, n = namespace, "ext"
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "llm"}, "stringData": {"api-key": "s3cr3t"}})
    kube.create_rag(ns, n, {"inference": {"url": llm_url, "apiKeySecretRef": {"name": "llm"}}})
    rag = kube.wait_ready(ns, n)
    assert not kube.exists("Deployment", ns, f"{n}-inference") and not kube.exists("Service", ns, f"{n}-inference")
    assert not kube.exists("PersistentVolumeClaim", ns, f"{n}-model-cache")
    env = env_of(kube.deployment(ns, f"{n}-engine"))
    assert env[EngineSettings.env_name("llm_url")] == llm_url
    assert env[EngineSettings.env_name("llm_api_key")] == {"secretKeyRef": {"name": "llm", "key": "api-key"}}
    conds = {x["type"]: x for x in rag["status"]["conditions"]}
    assert conds["InferenceReady"]["reason"] == "ExternalEndpoint"


def test_unschedulable_vllm_reports_degraded(kube, namespace):
    ns, n = namespace, "big"
    spec = {"inference": {"model": "m", "gpuResourceName": "nvidia.com/mig-3g.40gb"}}  # no fake node has MIG slices
    kube.create_rag(ns, n, spec)
    cond = wait_for(lambda: (x := kube.condition(ns, n, c.DEGRADED)) and x["status"] == "True" and x, 30, "Degraded=True")
    assert cond["reason"] == "Unschedulable" and "nvidia.com/mig-3g.40gb" in cond["message"]
    assert kube.condition(ns, n, c.READY)["status"] == "False"


def test_delete_garbage_collects_children(kube, namespace):
    ns, n = namespace, "gone"
    kube.create_rag(ns, n, {**MODEL_SPEC, "storage": {"volume": {"size": "1Gi", "reclaimPolicy": "Delete"}}})
    wait_for(lambda: all(kube.exists(k, ns, name.format(n=n)) for k, name in CHILDREN), 20, "all children")
    kube.delete_rag(ns, n)
    wait_for(lambda: not any(kube.exists(k, ns, name.format(n=n)) for k, name in CHILDREN), 60,
             "children garbage-collected by kube-controller-manager")


def test_deleted_child_is_recreated(kube, namespace):
    ns, n = namespace, "heal"
    kube.create_rag(ns, n, {})  # retrieval-only
    kube.wait_ready(ns, n)
    uid = kube.deployment(ns, f"{n}-engine")["metadata"]["uid"]
    kube.apps.delete_namespaced_deployment(f"{n}-engine", ns)
    wait_for(lambda: (d := kube.deployment(ns, f"{n}-engine")) and d["metadata"]["uid"] != uid, 20, "engine recreated")
    kube.wait_ready(ns, n)


def test_retained_volumes_outlive_the_ragengine_and_are_adopted_again(kube, namespace):
    """reclaimPolicy Retain (the default): the data and model-cache PVCs have no owner, so deleting the
    RAGEngine leaves them; a RAGEngine created again under the name adopts them (same claims, same data)."""
    ns, n = namespace, "keep"
    kube.create_rag(ns, n, MODEL_SPEC)
    kube.wait_ready(ns, n)
    claims = {name: kube.core.read_namespaced_persistent_volume_claim(name.format(n=n), ns)
              for name in ("{n}-data", "{n}-model-cache")}
    assert all(not claim.metadata.owner_references for claim in claims.values())
    kube.delete_rag(ns, n)
    wait_for(lambda: not kube.exists("Deployment", ns, f"{n}-engine"), 60, "the engine garbage-collected")
    for name, claim in claims.items():
        assert kube.core.read_namespaced_persistent_volume_claim(name.format(n=n), ns).metadata.uid == claim.metadata.uid
    kube.create_rag(ns, n, MODEL_SPEC)
    rag = kube.wait_ready(ns, n)
    assert kube.condition(ns, n, c.DEGRADED)["status"] == "False", rag["status"]
    for name, claim in claims.items():
        again = kube.core.read_namespaced_persistent_volume_claim(name.format(n=n), ns)
        assert again.metadata.uid == claim.metadata.uid and not again.metadata.owner_references

    # switched to Delete: the operator puts its owner reference on the adopted claims
    kube.patch_rag(ns, n, {"spec": {"storage": {"volume": {"reclaimPolicy": "Delete"}}}})
    owner = kube.get_rag(ns, n)["metadata"]["uid"]
    wait_for(lambda: all((kube.core.read_namespaced_persistent_volume_claim(name.format(n=n), ns).metadata
                          .owner_references or [None])[0] is not None for name in claims), 30, "owner references")
    refs = kube.core.read_namespaced_persistent_volume_claim(f"{n}-data", ns).metadata.owner_references
    assert refs[0].uid == owner and refs[0].controller
