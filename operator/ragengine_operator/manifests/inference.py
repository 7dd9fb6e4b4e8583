"""spec -> the vLLM Deployment, its Service and the model-cache PVC (model mode only)."""

from __future__ import annotations

from typing import Any

from .. import constants as c
from ..spec import RAGEngineSpec
from .engine_env import inference_api_key_ref
from .labels import (
    Owner,
    apply_pod_options,
    duration_seconds,
    hpa,
    http_probe,
    http_service,
    merge_resources,
    metadata,
    pick,
    pvc,
    selector,
    stamp_template,
)
from .security import container_security_context, locked_down_pod


def gpu_toleration(resource: str) -> dict[str, Any]:
    """GPU node pools are tainted with their resource name (the NVIDIA GPU operator's convention)."""
    return {"key": resource, "operator": "Exists", "effect": "NoSchedule"}
DEFAULT_RESOURCES = {"requests": {"cpu": "4", "memory": "16Gi"}}
STARTUP_PERIOD = 10  # seconds between startup probes; inference.startupTimeout / this = failures allowed


def inference_name(owner: Owner) -> str:
    return owner.child("inference")


def inference_network_policy(owner: Owner) -> dict[str, Any]:
    """Only the engine's pods may reach vLLM (on its port); nothing else in or outside the namespace."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(owner, inference_name(owner), c.COMPONENT_INFERENCE),
        "spec": {
            "podSelector": {"matchLabels": selector(owner, c.COMPONENT_INFERENCE)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": selector(owner, c.COMPONENT_ENGINE)}}],
                         "ports": [{"port": c.VLLM_PORT, "protocol": "TCP"}]}],
        },
    }


def model_cache_pvc_name(owner: Owner) -> str:
    return owner.child("model-cache")


def vllm_args(spec: RAGEngineSpec) -> list[str]:
    inf = spec.inference
    assert inf is not None and inf.model is not None
    args = [
        "--model", inf.model,
        "--served-model-name", inf.served_model_name or inf.model,
        "--tensor-parallel-size", str(inf.gpus),
        "--host", "0.0.0.0",
        "--port", str(c.VLLM_PORT),
    ]
    if inf.context_window is not None:
        args += ["--max-model-len", str(inf.context_window)]
    return args + list(inf.args)


def model_cache_pvc(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    mc = spec.inference.model_cache  # type: ignore[union-attr]
    return pvc(owner, model_cache_pvc_name(owner), c.COMPONENT_INFERENCE, mc.size, mc.storage_class_name, mc.access_mode,
               retain=spec.storage.reclaim_policy == "Retain")


def inference_deployment(owner: Owner, spec: RAGEngineSpec, secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """`secrets`: Secret name -> digest; the API key's and HF token's go into the config hash."""
    inf = spec.inference
    assert inf is not None and inf.model is not None
    gpus = str(inf.gpus)
    resources = merge_resources(DEFAULT_RESOURCES, inf.resources)
    # GPUs are an extended resource: request == limit, always from spec.inference.gpus.
    resources.setdefault("limits", {})[inf.gpu_resource_name] = gpus
    resources.setdefault("requests", {})[inf.gpu_resource_name] = gpus
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": c.VLLM_CACHE_DIR},
        # Non-root with a read-only home: every other cache goes to an emptyDir.
        {"name": "HOME", "value": c.VLLM_SCRATCH_DIR},
        {"name": "XDG_CACHE_HOME", "value": c.VLLM_SCRATCH_DIR},
        {"name": "VLLM_CACHE_ROOT", "value": f"{c.VLLM_SCRATCH_DIR}/vllm"},
    ]
    key = inference_api_key_ref(owner)  # vLLM reads VLLM_API_KEY like --api-key
    env.append({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": key.name, "key": key.key}}})
    if inf.hf_token_secret_ref is not None:
        ref = inf.hf_token_secret_ref
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    container = {
        "name": "vllm",
        "image": inf.image or owner.vllm_image,
        "args": vllm_args(spec),
        "ports": [{"name": "http", "containerPort": c.VLLM_PORT, "protocol": "TCP"}],
        "env": env,
        "resources": resources,
        "volumeMounts": [
            {"name": "model-cache", "mountPath": c.VLLM_CACHE_DIR},
            {"name": "cache", "mountPath": c.VLLM_SCRATCH_DIR},
            {"name": "dshm", "mountPath": "/dev/shm"},  # NCCL / tensor parallel need more than 64Mi
        ],
        "securityContext": container_security_context(),
        # A first start downloads the weights: inference.startupTimeout before liveness may kill the pod.
        "startupProbe": http_probe("/health", "http", period=STARTUP_PERIOD,
                                   failures=max(1, duration_seconds(inf.startup_timeout) // STARTUP_PERIOD)),
        "readinessProbe": http_probe("/health", "http", period=5, failures=3),
        "livenessProbe": http_probe("/health", "http", period=15, failures=4, timeout=10),
    }
    tolerations = [gpu_toleration(inf.gpu_resource_name)] + [
        t.model_dump(by_alias=True, exclude_none=True) for t in (inf.tolerations or [])
    ]
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "tolerations": tolerations,
        "volumes": [
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": model_cache_pvc_name(owner)}},
            {"name": "cache", "emptyDir": {}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": c.VLLM_SHM_LIMIT}},
        ],
        "terminationGracePeriodSeconds": 30,
        **locked_down_pod(c.VLLM_UID),
    }
    if inf.node_selector:
        pod_spec["nodeSelector"] = dict(inf.node_selector)
    read = {inference_api_key_ref(owner).name} | ({inf.hf_token_secret_ref.name} if inf.hf_token_secret_ref else set())
    pod = {"metadata": {"labels": metadata(owner, "", c.COMPONENT_INFERENCE)["labels"]}, "spec": pod_spec}
    apply_pod_options(pod, container, inf)
    template = stamp_template(pod, pick(secrets, read))
    shared_cache = inf.model_cache.access_mode == "ReadWriteMany"
    # ReadWriteOnce cache: old and new pods cannot share it across nodes -> Recreate. With a shared
    # cache roll one pod at a time without surging (a surge pod would need spare GPUs).
    strategy = (
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
        if shared_cache
        else {"type": "Recreate"}
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(owner, inference_name(owner), c.COMPONENT_INFERENCE),
        "spec": {
            # With an HPA the field is left out of our apply: the HPA owns it and we never revert it.
            **({"replicas": inf.replicas} if inf.autoscaling is None else {}),
            "strategy": strategy,
            "revisionHistoryLimit": 3,
            # model downloads are slow; container failures are reported at once, this is the backstop
            "progressDeadlineSeconds": max(600, duration_seconds(inf.startup_timeout)),
            "selector": {"matchLabels": selector(owner, c.COMPONENT_INFERENCE)},
            "template": template,
        },
    }


def inference_hpa(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    assert spec.inference is not None and spec.inference.autoscaling is not None
    return hpa(owner, inference_name(owner), c.COMPONENT_INFERENCE, spec.inference.autoscaling)


def inference_service(owner: Owner) -> dict[str, Any]:
    return http_service(owner, inference_name(owner), c.COMPONENT_INFERENCE, c.VLLM_PORT)
