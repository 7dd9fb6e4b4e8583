"""spec.inference: vLLM in the cluster (a model, its GPUs, cache, autoscaling and arguments) or an existing
OpenAI-compatible endpoint (a URL)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .. import vllm_cli
from .core import AutoscalingSpec, PodOptions, ResourceRequirements, SecretKeyRef, Size, Toleration, VolumeSpec, is_http
from .types import SpecModel, Url

MANAGED_VLLM_FLAGS = frozenset({"--port", "--served-model-name", "--max-model-len", "--tensor-parallel-size", "-tp",
                                "--api-key", "--model", "--host"})
TOOL_FLAGS = frozenset({"--tool-call-parser", "--enable-auto-tool-choice"})
MAX_GPUS_PER_NODE = 8  # the largest common GPU node (8x A100/H100/H200/B200, MI300X); one pod runs on one node
POSITIONAL_ARG = ("inference.args must start with an option (--name or --name=value): vLLM takes a leading bare "
                  "word for the model")
RWO_ONE_REPLICA = ("inference.replicas above 1 (or autoscaling.maxReplicas above 1) needs modelCache.accessMode "
                   "ReadWriteMany: a ReadWriteOnce cache mounts on one node only")


class HFTokenSecretRef(SecretKeyRef):
    """The Secret key holding a Hugging Face token."""

    key: Annotated[str, Field(min_length=1, max_length=253)] = Field("token", description="Key in the Secret.")


class ModelCacheSpec(VolumeSpec):
    """The PVC that holds downloaded model weights, so restarts do not download them again."""

    size: Size = Field("100Gi", description="Requested size; it can grow but never shrink.")
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = Field(
        "ReadWriteOnce",
        description="ReadWriteMany lets replicas on several nodes share the cache (and enables rolling updates).",
    )


class KedaSpec(SpecModel):
    """Scale vLLM with KEDA's Prometheus scaler (a ScaledObject; KEDA then owns the HPA)."""

    server_address: Url = Field(
        description="Prometheus that scrapes vLLM (see spec.observability.metrics), e.g. http://prometheus-operated.monitoring:9090."
    )


class InferenceAutoscalingSpec(AutoscalingSpec):
    """Replicas of vLLM from its load: CPU utilisation (an HPA), or the requests waiting in vLLM's queue."""

    metric: Literal["cpu", "requestsWaiting"] = Field(
        "cpu", description="cpu: an HPA on CPU utilisation. requestsWaiting: on vllm:num_requests_waiting per pod, "
        "through KEDA when keda is set, else an HPA on that Pods metric (a custom-metrics adapter such as "
        "prometheus-adapter must serve it).",
    )
    target_requests_waiting: int = Field(
        5, ge=1, le=10_000, description="requestsWaiting: the average number of waiting requests per pod to hold."
    )
    keda: KedaSpec | None = Field(None, description="requestsWaiting through KEDA instead of an HPA.")

    @model_validator(mode="after")
    def _keda_metric(self) -> InferenceAutoscalingSpec:
        if self.keda is not None and self.metric != "requestsWaiting":
            raise ValueError("inference.autoscaling.keda needs metric requestsWaiting")
        return self


class InferenceSpec(PodOptions):
    """Either run vLLM in the cluster (model) or use an existing OpenAI-compatible endpoint (url)."""

    model: Annotated[str, Field(max_length=512)] | None = Field(
        None, description="Hugging Face model id served by vLLM in the cluster. Exactly one of model/url."
    )
    url: Url | None = Field(None, description="Existing OpenAI-compatible base URL ending in /v1. Exactly one of model/url.")
    served_model_name: Annotated[str, Field(max_length=512)] | None = Field(
        None,
        description="Model name clients and the engine use; defaults to model. Setting it keeps the engine "
        "untouched when the model changes.",
    )
    api_key_secret_ref: SecretKeyRef | None = Field(None, description="Bearer token for url (url mode only).")
    context_window: int | None = Field(
        None, ge=256, le=10_000_000,
        description="Tokens; vLLM --max-model-len and the engine's prompt budget. Unset: --max-model-len auto, the "
        "model's full length if the KV cache fits it on the GPUs, else the longest that fits (the engine reads "
        "it from vLLM's /v1/models).",
    )
    revision: Annotated[str, Field(max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")] | None = Field(
        None, description="Hugging Face revision of the model (a commit, tag or branch): vLLM --revision, the "
        "tokenizer too. Pin a commit so a restart never picks up new upstream weights.",
    )
    tool_call_parser: Annotated[str, Field(max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")] | None = Field(
        None, description="vLLM's tool-call parser (--enable-auto-tool-choice --tool-call-parser), which tool "
        "calling needs (conversation mode tools, clients' tools). Unset: the default for the model's family "
        "(hermes for Qwen2.5/Qwen3, llama3_json for Llama 3, mistral, ...: docs/operator.md); none: off.",
    )
    image: Annotated[str, Field(max_length=512)] | None = Field(
        None, description="vLLM OpenAI server image; the operator's default when unset."
    )
    gpus: int = Field(
        1, ge=1, le=64,  # the CEL rule (and _one_mode) say why 8 is the limit
        description="GPUs per replica (gpuResourceName), = --tensor-parallel-size. One replica is one pod on one "
        "node, so at most a node's GPUs (8); serving across nodes is not built (docs/multi-node.md).",
    )
    gpu_resource_name: Annotated[str, Field(max_length=253, pattern=r"^[a-z0-9.-]+/[a-zA-Z0-9._-]+$")] = Field(
        "nvidia.com/gpu", description="Extended resource of a GPU: nvidia.com/gpu, a MIG profile such as "
        "nvidia.com/mig-1g.10gb, amd.com/gpu, ... (also the toleration's key)."
    )
    replicas: int = Field(
        1, ge=0, le=100,
        description="vLLM pods; 0 frees the GPUs. Above 1 needs modelCache.accessMode ReadWriteMany. Ignored "
        "while autoscaling is set. Also the scale subresource (kubectl scale rag/<name> --replicas=N).",
    )
    autoscaling: InferenceAutoscalingSpec | None = Field(
        None, description="Autoscale vLLM (an HPA, or a KEDA ScaledObject); the operator then stops applying replicas."
    )
    startup_timeout: Annotated[str, Field(pattern=r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$", max_length=16)] = Field(
        "30m", description="How long a vLLM pod may take to start (download + load) before it is restarted: "
        "e.g. 45m, 2h."
    )
    args: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=64,
        description="Extra vLLM arguments, before the operator's own flags (--port, --served-model-name, "
        "--max-model-len, --tensor-parallel-size, --api-key, --model, --host), which win. Those flags (also "
        "spelt with underscores), --config, --uds and a leading bare word are refused: set the fields instead.",
    )
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = Field(
        None, max_length=32, description="Added to the default nvidia.com/gpu toleration."
    )
    resources: ResourceRequirements | None = Field(
        None, description="Extra requests/limits; nvidia.com/gpu is always set from gpus."
    )
    model_cache: ModelCacheSpec = Field(default_factory=ModelCacheSpec, json_schema_extra={"default": {}})
    hf_token_secret_ref: HFTokenSecretRef | None = Field(
        None, description="Hugging Face token for gated models (model mode only)."
    )

    @model_validator(mode="after")
    def _one_mode(self) -> InferenceSpec:
        if (self.model is None) == (self.url is None):
            raise ValueError("exactly one of inference.model or inference.url must be set")
        if self.url is not None and not is_http(self.url):
            raise ValueError("inference.url must be an http:// or https:// URL")
        if self.url is not None and self.hf_token_secret_ref is not None:
            raise ValueError("inference.hfTokenSecretRef applies to inference.model only")
        if self.model is not None and self.api_key_secret_ref is not None:
            raise ValueError("inference.apiKeySecretRef applies to inference.url only")
        self._check_args()
        if self.url is not None and (self.revision is not None or self.tool_call_parser is not None):
            raise ValueError("inference.revision and inference.toolCallParser apply to inference.model only")
        if self.gpus > MAX_GPUS_PER_NODE:
            raise ValueError(GPUS_ABOVE_A_NODE)
        if "/mig-" in self.gpu_resource_name and self.gpus > 1:
            raise ValueError(MIG_ONE_GPU)
        if not self.gpu_resource_name.startswith("nvidia.com/") and self.image is None:
            raise ValueError(NON_NVIDIA_IMAGE)
        several = self.replicas > 1 or (self.autoscaling is not None and self.autoscaling.max_replicas > 1)
        if several and self.model_cache.access_mode == "ReadWriteOnce":
            raise ValueError(RWO_ONE_REPLICA)
        if self.startup_timeout in ("", "0s", "0m", "0h"):
            raise ValueError("inference.startupTimeout must be a positive duration such as 30m")
        return self

    def _check_args(self) -> None:
        """The spellings vLLM reads as one of the operator's flags (vllm_cli.py), in the words of the CRD's
        CEL rules. Other spellings (unique prefixes) lose to the operator's flags, which come last."""
        found = vllm_cli.overridden(self.args, MANAGED_VLLM_FLAGS)
        own = [f for f in found if f in MANAGED_VLLM_FLAGS]
        if own:
            raise ValueError(f"inference.args must not set {', '.join(own)}: the operator sets them from the spec")
        if found:
            raise ValueError(OVERRIDING_ARGS)
        if vllm_cli.leading_positional(self.args) is not None:
            raise ValueError(POSITIONAL_ARG)
        if self.revision is not None and vllm_cli.overridden(self.args, {"--revision"}):
            raise ValueError("inference.args must not set --revision when inference.revision is set")
        if self.tool_call_parser is not None and vllm_cli.overridden(self.args, TOOL_FLAGS):
            raise ValueError("inference.args must not set --tool-call-parser or --enable-auto-tool-choice when "
                             "inference.toolCallParser is set")


GPUS_ABOVE_A_NODE = ("inference.gpus is at most 8, a node's GPUs: one vLLM replica is one pod on one node, and "
                     "serving across nodes is not built (docs/multi-node.md)")
MIG_ONE_GPU = ("inference.gpus above 1 needs whole GPUs: a CUDA process sees one MIG instance, so tensor "
               "parallelism over MIG slices cannot work")
NON_NVIDIA_IMAGE = ("inference.gpuResourceName other than nvidia.com/* needs inference.image: the default vLLM image "
                    "is built for CUDA (for amd.com/gpu use a ROCm build such as vllm/vllm-openai-rocm)")
OVERRIDING_ARGS = ("inference.args must not set --config or --uds: a config file or a Unix socket would override the "
                   "operator's flags")
