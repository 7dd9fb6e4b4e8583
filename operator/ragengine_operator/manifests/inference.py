"""spec -> the vLLM Deployment, its Service and the model-cache PVC (model mode only)."""

from __future__ import annotations

from typing import Any

from .. import constants as c
from .. import vllm_cli
from ..spec import RAGEngineSpec
from .engine_env import inference_api_key_ref, otel_env
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
from .model_facts import OFF, default_tool_call_parser, host_memory_request
from .security import container_security_context, locked_down_pod

STARTUP_PERIOD = 10  # seconds between startup probes; inference.startupTimeout / this = failures allowed
# Shutdown: the preStop hook holds SIGTERM back while the pod leaves the Service's endpoints (kube-proxy and
# the engine's connection pool catch up), then vLLM drains: --shutdown-timeout lets in-flight requests
# finish (without it vLLM aborts them, streams included). The grace period covers both, with a margin.
PRESTOP_SECONDS = 10
SHUTDOWN_TIMEOUT = 60
TERMINATION_GRACE = PRESTOP_SECONDS + SHUTDOWN_TIMEOUT + 20
VLLM_USER = "vllm"  # the uid has no passwd entry in the vLLM image: USER/LOGNAME answer getpass.getuser()


def gpu_tolerations(resource: str) -> list[dict[str, Any]]:
    """GPU nodes are tainted nvidia.com/gpu (GKE, AKS, the usual GPU-operator setups), MIG nodes too;
    some pools are tainted with their own resource name (a MIG profile, amd.com/gpu): tolerate both."""
    keys = [c.GPU_RESOURCE] + ([resource] if resource != c.GPU_RESOURCE else [])
    return [{"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in keys]


def tool_call_parser(inf: Any) -> str | None:
    """The parser vLLM runs for tool calls: the spec's, else the model family's default; None = off. A
    --tool-call-parser in inference.args is the user's own (then the operator adds none)."""
    if inf.tool_call_parser is not None:
        return None if inf.tool_call_parser == OFF else inf.tool_call_parser
    if vllm_cli.overridden(list(inf.args), {"--tool-call-parser"}):
        return None
    return default_tool_call_parser(inf.model or "")


def vllm_env() -> list[dict[str, Any]]:
    """The non-root runtime: vLLM runs as uid 1000, which has no passwd entry in the image, under a
    read-only-ish home. torch.compile reaches getpass.getuser() (torch/_inductor), which raises
    KeyError without USER/LOGNAME; every cache (torch inductor, triton, vLLM, XDG, CUDA) goes to the
    writable emptyDir; usage statistics stay off (vLLM reports to stats.vllm.ai by default)."""
    scratch = c.VLLM_SCRATCH_DIR
    return [
        {"name": "HF_HOME", "value": c.VLLM_CACHE_DIR},
        {"name": "USER", "value": VLLM_USER},
        {"name": "LOGNAME", "value": VLLM_USER},
        {"name": "HOME", "value": scratch},
        {"name": "XDG_CACHE_HOME", "value": scratch},
        {"name": "XDG_CONFIG_HOME", "value": f"{scratch}/config"},
        {"name": "VLLM_CACHE_ROOT", "value": f"{scratch}/vllm"},
        {"name": "VLLM_CONFIG_ROOT", "value": f"{scratch}/config/vllm"},
        {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{scratch}/torchinductor"},
        {"name": "TRITON_CACHE_DIR", "value": f"{scratch}/triton"},
        {"name": "TORCH_HOME", "value": f"{scratch}/torch"},
        {"name": "CUDA_CACHE_PATH", "value": f"{scratch}/nv"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
    ]


def inference_name(owner: Owner) -> str:
    return owner.child("inference")


def inference_network_policy(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    """Only the engine's pods (and Prometheus, with spec.observability.metrics) may reach vLLM, on its port; nothing
    else in or outside the namespace. vLLM's API key guards only /v1, /v2, /inference and /cohere: its
    /metrics, /tokenize, /score, /rerank, /pooling, /classify and /invocations (generation) are open, so
    this policy is the real lock."""
    peers: list[dict[str, Any]] = [{"podSelector": {"matchLabels": selector(owner, c.COMPONENT_ENGINE)}}]
    if spec.observability.metrics is not None:
        peers += [p.model_dump(by_alias=True, exclude_none=True) for p in spec.observability.metrics.scrape_from]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(owner, inference_name(owner), c.COMPONENT_INFERENCE),
        "spec": {
            "podSelector": {"matchLabels": selector(owner, c.COMPONENT_INFERENCE)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"port": c.VLLM_PORT, "protocol": "TCP"}]}],
        },
    }


def model_cache_pvc_name(owner: Owner) -> str:
    return owner.child("model-cache")


def vllm_args(spec: RAGEngineSpec) -> list[str]:
    """`vllm serve` arguments (the image's entrypoint); each flag is checked against the pinned release's
    parser (vllm_flags.json, hack/vllm_flags.py). `--model` rather than the positional model tag: both
    entrypoints vLLM images have used (`vllm serve`, `python -m vllm.entrypoints.openai.api_server`) read
    it. The user's args come first and the operator's flags last: a later option wins, so a spelling of
    one of them that slipped past spec.py's refusal (vllm_cli.py) still loses."""
    inf = spec.inference
    assert inf is not None and inf.model is not None
    args = [
        *inf.args,
        "--model", inf.model,
        "--served-model-name", inf.served_model_name or inf.model,
        "--tensor-parallel-size", str(inf.gpus),
        "--host", "0.0.0.0",
        "--port", str(c.VLLM_PORT),
        # unset: the model's full length if its KV cache fits the GPUs, else the longest that does
        "--max-model-len", str(inf.context_window) if inf.context_window is not None else "auto",
        f"--shutdown-timeout={SHUTDOWN_TIMEOUT}",
    ]
    if inf.revision is not None:
        args += ["--revision", inf.revision]
    parser = tool_call_parser(inf)
    if parser is not None:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    tracing = spec.observability.tracing
    if tracing is not None:  # vLLM's spans join the engine's traces (the engine sends traceparent)
        args += ["--otlp-traces-endpoint", tracing.endpoint]
    return args


def model_cache_pvc(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    mc = spec.inference.model_cache  # type: ignore[union-attr]
    return pvc(owner, model_cache_pvc_name(owner), c.COMPONENT_INFERENCE, mc.size, mc.storage_class_name, mc.access_mode,
               retain=spec.storage.volume.reclaim_policy == "Retain")


def inference_deployment(owner: Owner, spec: RAGEngineSpec, secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """`secrets`: Secret name -> digest; the API key's and HF token's go into the config hash."""
    inf = spec.inference
    assert inf is not None and inf.model is not None
    gpus = str(inf.gpus)
    # Host memory by the model's size (weights are staged through host memory); spec resources win.
    defaults = {"requests": {"cpu": "4", "memory": host_memory_request(inf.model, inf.gpus)}}
    resources = merge_resources(defaults, inf.resources)
    # GPUs are an extended resource: request == limit, always from spec.inference.gpus.
    resources.setdefault("limits", {})[inf.gpu_resource_name] = gpus
    resources.setdefault("requests", {})[inf.gpu_resource_name] = gpus
    env = vllm_env() + otel_env(owner, spec, "vllm")  # protocol, sampler, resource for --otlp-traces-endpoint
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
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SECONDS)]}}},
    }
    tolerations = gpu_tolerations(inf.gpu_resource_name) + [
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
        "terminationGracePeriodSeconds": TERMINATION_GRACE,
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
    """CPU utilisation, or vLLM's queue per pod (metric requestsWaiting: a Pods metric that a custom-metrics
    adapter serves from Prometheus; vLLM's own name for it, colon included)."""
    inf = spec.inference
    assert inf is not None and inf.autoscaling is not None
    a = inf.autoscaling
    metric = None if a.metric == "cpu" else {"type": "Pods", "pods": {
        "metric": {"name": WAITING_METRIC}, "target": {"type": "AverageValue", "averageValue": str(a.target_requests_waiting)}}}
    return hpa(owner, inference_name(owner), c.COMPONENT_INFERENCE, a, metric)


WAITING_METRIC = "vllm:num_requests_waiting"


def inference_scaled_object(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    """A KEDA ScaledObject on the vLLM Deployment: Prometheus' sum of vllm:num_requests_waiting over this
    RAGEngine's vLLM pods, `targetRequestsWaiting` per replica (KEDA makes and owns the HPA). The pods are
    matched by name, which every scrape (ServiceMonitor or PodMonitor) labels them with."""
    inf = spec.inference
    assert inf is not None and inf.autoscaling is not None and inf.autoscaling.keda is not None
    a, keda, name = inf.autoscaling, inf.autoscaling.keda, inference_name(owner)
    query = f'sum({WAITING_METRIC}{{namespace="{owner.namespace}",pod=~"{name}-[a-z0-9]+-[a-z0-9]+"}})'
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(owner, name, c.COMPONENT_INFERENCE),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": a.max_replicas,
            "triggers": [{"type": "prometheus", "metadata": {
                "serverAddress": keda.server_address, "query": query, "threshold": str(a.target_requests_waiting)}}],
        },
    }


def inference_service(owner: Owner) -> dict[str, Any]:
    return http_service(owner, inference_name(owner), c.COMPONENT_INFERENCE, c.VLLM_PORT)
