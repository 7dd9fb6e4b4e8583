"""The vLLM pod as it would really run (issue 23), rendered without a cluster: the non-root runtime's
environment, shutdown, sizing, GPU tolerations, tool calling, autoscaling on vLLM's queue, scraping, and
the Services' DNS names under any cluster domain."""

from __future__ import annotations

import getpass
import pwd

import pytest

from ragengine_operator import constants as c
from ragengine_operator.manifests.engine import endpoint, engine_network_policy
from ragengine_operator.manifests.engine_env import engine_values
from ragengine_operator.manifests.inference import (
    PRESTOP_SECONDS,
    SHUTDOWN_TIMEOUT,
    inference_deployment,
    inference_network_policy,
    vllm_args,
)
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.manifests.model_facts import host_memory_request, parameters_billions
from ragengine_operator.reconcile.plan import plan
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("team-a", "docs", "uid-1")
QWEN = {"inference": {"model": "Qwen/Qwen2.5-7B-Instruct"}}


def spec_of(inference: dict, **top) -> RAGEngineSpec:
    return RAGEngineSpec.model_validate({"inference": inference, **top})


def pod(inference: dict | None = None, **top) -> dict:
    return inference_deployment(OWNER, spec_of(inference or QWEN["inference"], **top))["spec"]["template"]["spec"]


def env_of(pod_spec: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod_spec["containers"][0]["env"] if "value" in e}


# --- the uid without a passwd entry -----------------------------------------------------------------
def test_getuser_answers_from_the_env_for_a_uid_without_passwd_entry(monkeypatch):
    """torch.compile reaches getpass.getuser() (torch/_inductor's cache dir); in the vLLM image uid 1000
    has no passwd entry, so without USER/LOGNAME getuser() raises KeyError and vLLM crash-loops."""
    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env_of(pod()).items():
        monkeypatch.setenv(name, value)
    assert getpass.getuser() == "vllm"


def test_every_cache_is_on_a_writable_volume_and_telemetry_is_off():
    p = pod()
    (ctr,) = p["containers"]
    env = env_of(p)
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    volumes = {v["name"]: v for v in p["volumes"]}
    assert "emptyDir" in volumes[mounts[c.VLLM_SCRATCH_DIR]] and mounts[c.VLLM_CACHE_DIR] == "model-cache"
    caches = ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT",
              "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_HOME", "CUDA_CACHE_PATH")
    for name in caches:
        assert env[name] == c.VLLM_SCRATCH_DIR or env[name].startswith(c.VLLM_SCRATCH_DIR + "/"), name
    assert env["HF_HOME"] == c.VLLM_CACHE_DIR
    assert env["USER"] == env["LOGNAME"] == "vllm"
    assert env["VLLM_NO_USAGE_STATS"] == env["DO_NOT_TRACK"] == "1"
    assert p["securityContext"]["runAsUser"] == c.VLLM_UID and p["securityContext"]["runAsNonRoot"] is True


def test_users_env_cannot_undo_the_runtime_env():
    p = pod({**QWEN["inference"], "env": [{"name": "USER", "value": "root"}, {"name": "EXTRA", "value": "1"}]})
    names = [e["name"] for e in p["containers"][0]["env"]]
    assert names.count("USER") == 1 and env_of(p)["USER"] == "vllm" and "EXTRA" in names


# --- shutdown: in-flight requests finish ------------------------------------------------------------
def test_shutdown_drains_in_flight_requests_within_the_grace_period():
    p = pod()
    (ctr,) = p["containers"]
    assert ctr["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", str(PRESTOP_SECONDS)]}}
    assert f"--shutdown-timeout={SHUTDOWN_TIMEOUT}" in ctr["args"]
    assert p["terminationGracePeriodSeconds"] > PRESTOP_SECONDS + SHUTDOWN_TIMEOUT


# --- model: revision, context length, tool calls ------------------------------------------------------
def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_revision_and_context_length():
    args = vllm_args(spec_of({"model": "m", "revision": "a1b2c3"}))
    assert flag(args, "--revision") == "a1b2c3" and flag(args, "--max-model-len") == "auto"
    assert flag(vllm_args(spec_of({"model": "m", "contextWindow": 8192})), "--max-model-len") == "8192"
    assert "--revision" not in vllm_args(spec_of({"model": "m"}))


@pytest.mark.parametrize(("inference", "parser"), [
    ({"model": "Qwen/Qwen2.5-7B-Instruct"}, "hermes"),
    ({"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"}, "qwen3_coder"),
    ({"model": "meta-llama/Llama-3.1-8B-Instruct"}, "llama3_json"),
    ({"model": "mistralai/Mistral-7B-Instruct-v0.3"}, "mistral"),
    ({"model": "openai/gpt-oss-20b"}, "openai"),
    ({"model": "some-org/unknown"}, None),
    ({"model": "Qwen/Qwen2.5-7B-Instruct", "toolCallParser": "none"}, None),
    ({"model": "some-org/unknown", "toolCallParser": "pythonic"}, "pythonic"),
    ({"model": "Qwen/Qwen2.5-7B-Instruct", "args": ["--tool-call-parser=qwen3_xml", "--enable-auto-tool-choice"]},
     "qwen3_xml"),  # the user's own: the operator adds no second one
])
def test_tool_call_parser_by_family_field_or_args(inference, parser):
    args = vllm_args(spec_of(inference))
    parsers = [a.split("=", 1)[1] if "=" in a else args[i + 1] for i, a in enumerate(args)
               if a.split("=", 1)[0] == "--tool-call-parser"]
    assert parsers == ([parser] if parser else [])
    assert ("--enable-auto-tool-choice" in args) == (parser is not None)


# --- sizing and placement ---------------------------------------------------------------------------
@pytest.mark.parametrize(("model", "gpus", "billions", "memory"), [
    ("Qwen/Qwen2.5-0.5B-Instruct", 1, 0.5, "16Gi"),
    ("Qwen/Qwen2.5-7B-Instruct", 1, 7, "18Gi"),
    ("meta-llama/Llama-3.3-70B-Instruct", 4, 70, "147Gi"),
    ("Qwen/Qwen2.5-72B-Instruct-AWQ", 2, 72, "45Gi"),
    ("Qwen/Qwen3-30B-A3B", 1, 30, "60Gi"),  # 30B in total, 3B active: all of it is loaded
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, 56, "113Gi"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", 1, 0.135, "16Gi"),
    ("some-org/unknown", 1, None, "16Gi"),
])
def test_host_memory_request_follows_the_model_size(model, gpus, billions, memory):
    assert parameters_billions(model) == billions
    assert host_memory_request(model, gpus) == memory
    p = pod({"model": model, "gpus": gpus})
    assert p["containers"][0]["resources"]["requests"]["memory"] == memory


def test_the_spec_memory_request_wins():
    p = pod({"model": "meta-llama/Llama-3.3-70B-Instruct", "resources": {"requests": {"memory": "64Gi"}}})
    assert p["containers"][0]["resources"]["requests"]["memory"] == "64Gi"


def test_gpu_tolerations():
    def keys(inference):
        return [t["key"] for t in pod(inference)["tolerations"]]
    assert keys(QWEN["inference"]) == ["nvidia.com/gpu"]
    assert keys({"model": "m", "gpuResourceName": "nvidia.com/mig-1g.10gb"}) == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
    rocm = {"model": "m", "gpuResourceName": "amd.com/gpu", "image": "vllm/vllm-openai-rocm:v0.33.0"}
    assert keys(rocm) == ["nvidia.com/gpu", "amd.com/gpu"]
    assert pod(rocm)["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "1"


# --- who may reach vLLM, and scraping -----------------------------------------------------------------
PROMETHEUS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}


def test_vllm_network_policy_rendered_not_enforced_admits_the_engine_and_prometheus_only():
    bare = inference_network_policy(OWNER, spec_of(QWEN["inference"]))["spec"]["ingress"]
    engine_peer = {"podSelector": {"matchLabels": {c.SELECTOR_NAME: "docs", c.SELECTOR_COMPONENT: "engine"}}}
    assert bare == [{"from": [engine_peer], "ports": [{"port": c.VLLM_PORT, "protocol": "TCP"}]}]
    scraped = inference_network_policy(OWNER, spec_of(QWEN["inference"], observability={"metrics": {}}))["spec"]["ingress"]
    assert scraped[0]["from"] == [engine_peer, PROMETHEUS]
    # the engine's own (opt-in) policy admits the scrapers too
    both = spec_of(QWEN["inference"], observability={"metrics": {}}, engine={"networkPolicy": {"allowFrom": []}})
    assert PROMETHEUS in engine_network_policy(OWNER, both)["spec"]["ingress"][0]["from"]
    # the policy is part of every model-mode plan: on by default
    assert "NetworkPolicy/docs-inference" in plan(OWNER, spec_of(QWEN["inference"])).names()


def test_service_monitors_or_pod_monitors_for_both_components():
    spec = spec_of(QWEN["inference"],
                   observability={"metrics": {"labels": {"release": "kube-prometheus-stack"}, "interval": "15s"}})
    monitors = [o for o in plan(OWNER, spec).apply if o["apiVersion"] == "monitoring.coreos.com/v1"]
    assert [(m["kind"], m["metadata"]["name"]) for m in monitors] == [("ServiceMonitor", "docs-engine"),
                                                                      ("ServiceMonitor", "docs-inference")]
    engine, vllm = monitors
    assert engine["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert vllm["spec"]["selector"]["matchLabels"] == {c.SELECTOR_NAME: "docs", c.SELECTOR_COMPONENT: "inference"}
    assert vllm["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    assert vllm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    pods = spec_of(QWEN["inference"], observability={"metrics": {"kind": "PodMonitor"}})
    p = plan(OWNER, pods)
    (monitor,) = [o for o in p.apply if o["kind"] == "PodMonitor" and o["metadata"]["name"] == "docs-inference"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    # the other kind is cleaned up
    assert ("ServiceMonitor", "docs-inference") in {(r.kind, r.name) for r in p.delete}
    url = RAGEngineSpec.model_validate({"inference": {"url": "http://llm/v1"}, "observability": {"metrics": {}}})
    assert [o["metadata"]["name"] for o in plan(OWNER, url).apply if o["kind"] == "ServiceMonitor"] == ["docs-engine"]


# --- autoscaling on vLLM's queue ------------------------------------------------------------------------
RWX = {"modelCache": {"accessMode": "ReadWriteMany"}}


def test_hpa_on_requests_waiting():
    spec = spec_of({**QWEN["inference"], **RWX, "autoscaling": {"maxReplicas": 4, "metric": "requestsWaiting",
                                                                "targetRequestsWaiting": 3}})
    (hpa,) = [o for o in plan(OWNER, spec).apply if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["metrics"] == [{"type": "Pods", "pods": {"metric": {"name": "vllm:num_requests_waiting"},
                                                                "target": {"type": "AverageValue", "averageValue": "3"}}}]
    cpu = spec_of({**QWEN["inference"], **RWX, "autoscaling": {"maxReplicas": 4}})
    (hpa,) = [o for o in plan(OWNER, cpu).apply if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"


def test_keda_scaled_object_instead_of_an_hpa():
    spec = spec_of({**QWEN["inference"], **RWX, "autoscaling": {
        "minReplicas": 1, "maxReplicas": 4, "metric": "requestsWaiting",
        "keda": {"serverAddress": "http://prometheus-operated.monitoring:9090"}}})
    p = plan(OWNER, spec)
    (scaled,) = [o for o in p.apply if o["kind"] == "ScaledObject"]
    assert not [o for o in p.apply if o["kind"] == "HorizontalPodAutoscaler"]
    assert ("HorizontalPodAutoscaler", "docs-inference") in {(r.kind, r.name) for r in p.delete}
    assert scaled["spec"]["scaleTargetRef"]["name"] == "docs-inference"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["query"] == ('sum(vllm:num_requests_waiting{namespace="team-a",'
                                            'pod=~"docs-inference-[a-z0-9]+-[a-z0-9]+"})')
    assert trigger["metadata"]["threshold"] == "5"
    dep = next(o for o in p.apply if o["kind"] == "Deployment" and o["metadata"]["name"] == "docs-inference")
    assert "replicas" not in dep["spec"]  # the autoscaler owns it


# --- cluster domain -----------------------------------------------------------------------------------
def test_service_urls_follow_the_cluster_domain():
    spec = spec_of(QWEN["inference"])
    assert endpoint(OWNER) == "http://docs.team-a.svc.cluster.local"
    other = Owner("team-a", "docs", "uid-1", cluster_domain="corp.example")
    assert endpoint(other) == "http://docs.team-a.svc.corp.example"
    assert engine_values(other, spec)["llm_url"] == "http://docs-inference.team-a.svc.corp.example:8000/v1"
    short = Owner("team-a", "docs", "uid-1", cluster_domain="")
    assert endpoint(short) == "http://docs.team-a.svc"
