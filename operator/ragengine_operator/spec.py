"""RAGEngine spec: THE schema source (with spec_network.py, sources/spec.py and, for status, spec_status.py).

hack/gen_crds.py turns these models into the CRD's structural schema (plus the CEL rules, printer
columns and short names in hack/crd-overlay.yaml); the controller parses every object's spec with the
same models. Rules that the API server enforces with CEL are mirrored in the validators below so a
spec that slipped past an old CRD still fails loudly in the operator instead of half-working.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from ragengine.settings import CONTEXT_TOKEN_RATIO_MAX, CONTEXT_TOKEN_RATIO_MIN

from . import vllm_cli
from .sources.spec import IndexSettings, Source, effective_sources, unique_indexes, unique_names
from .spec_access import AccessSpec
from .spec_evaluation import EvaluationSpec
from .spec_network import EngineNetworkPolicySpec, NetworkPolicyPeer
from .spec_types import LabelMap, Name, SpecModel, Url

# A resource quantity ("10Gi", "500m", 2): int-or-string in the schema, like core/v1.
Quantity = Annotated[str | int, WithJsonSchema({"x-kubernetes-int-or-string": True})]
_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


def _positive_quantity(value: str) -> str:
    if not _QUANTITY.match(value) or float(re.sub(r"[^0-9.].*$", "", value) or 0) <= 0:
        raise ValueError("size must be a positive resource quantity such as 20Gi")
    return value


# A size for a volume: a string so CEL can compare it with quantity() (see hack/crd-overlay.yaml); the
# validator mirrors the CEL rule (it does not change the generated schema).
Size = Annotated[str, Field(max_length=32), AfterValidator(_positive_quantity)]


MANAGED_VLLM_FLAGS = frozenset({"--port", "--served-model-name", "--max-model-len", "--tensor-parallel-size", "-tp",
                                "--api-key", "--model", "--host"})
TOOL_FLAGS = frozenset({"--tool-call-parser", "--enable-auto-tool-choice"})
MAX_GPUS_PER_NODE = 8  # the largest common GPU node (8x A100/H100/H200/B200, MI300X); one pod runs on one node
POSITIONAL_ARG = ("inference.args must start with an option (--name or --name=value): vLLM takes a leading bare "
                  "word for the model")
RWO_ONE_REPLICA = ("inference.replicas above 1 (or autoscaling.maxReplicas above 1) needs modelCache.accessMode "
                   "ReadWriteMany: a ReadWriteOnce cache mounts on one node only")


def _is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


class SecretKeyRef(SpecModel):
    """A key of a Secret in the RAGEngine's namespace."""

    name: Name = Field(description="Secret name.")
    key: Annotated[str, Field(min_length=1, max_length=253)] = Field("api-key", description="Key in the Secret.")


class HFTokenSecretRef(SecretKeyRef):
    """The Secret key holding a Hugging Face token."""

    key: Annotated[str, Field(min_length=1, max_length=253)] = Field("token", description="Key in the Secret.")


class ResourceRequirements(SpecModel):
    """Compute resources of a container, as in core/v1 (requests and limits)."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class Toleration(SpecModel):
    """A core/v1 toleration."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


# core/v1 objects passed through to the pod as written; the API server validates them on the Deployment.
_K8sObject = Annotated[dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})]


class LocalObjectReference(SpecModel):
    name: Name


class EnvVar(SpecModel):
    """A core/v1 EnvVar: `value`, or `valueFrom` (secretKeyRef, configMapKeyRef, fieldRef, ...)."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")]
    value: Annotated[str, Field(max_length=32768)] | None = None
    value_from: _K8sObject | None = None


class PodOptions(SpecModel):
    """Fleet settings of one component's pods, passed to its pod template."""

    affinity: _K8sObject | None = Field(None, description="core/v1 Affinity.")
    topology_spread_constraints: list[_K8sObject] | None = Field(None, max_length=16)
    priority_class_name: Annotated[str, Field(max_length=253)] | None = None
    runtime_class_name: Annotated[str, Field(max_length=253)] | None = None
    image_pull_secrets: list[LocalObjectReference] | None = Field(None, max_length=16)
    service_account_name: Annotated[str, Field(max_length=253)] | None = Field(
        None, description="Its token is not mounted (automountServiceAccountToken: false)."
    )
    pod_labels: LabelMap | None = Field(None, description="Added to the pods; the operator's own labels win.")
    pod_annotations: dict[str, Annotated[str, Field(max_length=4096)]] | None = Field(None, max_length=64)
    env: list[EnvVar] | None = Field(
        None, max_length=64, description="Extra env; the variables the operator sets from the spec win over these."
    )


class VolumeSpec(SpecModel):
    size: Size = Field("20Gi", description="Requested size; it can grow but never shrink.")
    storage_class_name: Annotated[str, Field(max_length=253)] | None = Field(
        None, description="StorageClass; the cluster default when unset. Immutable (data would be lost)."
    )


class ModelCacheSpec(VolumeSpec):
    """The PVC that holds downloaded model weights, so restarts do not download them again."""

    size: Size = Field("100Gi", description="Requested size; it can grow but never shrink.")
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = Field(
        "ReadWriteOnce",
        description="ReadWriteMany lets replicas on several nodes share the cache (and enables rolling updates).",
    )


class AutoscalingSpec(SpecModel):
    """A HorizontalPodAutoscaler owns the replica count (CPU utilisation target); the operator stops applying replicas."""

    min_replicas: int = Field(1, ge=1, le=100)
    max_replicas: int = Field(ge=1, le=100)
    target_cpu_utilization_percentage: int = Field(
        80, ge=1, le=100, alias="targetCPUUtilizationPercentage", description="Average CPU of requests, in %."
    )

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError("autoscaling.minReplicas must not exceed maxReplicas")
        return self


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
        if self.url is not None and not _is_http(self.url):
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


class LocalEmbeddingSpec(SpecModel):
    """An embedding model the engine runs itself (on its CPU, or its GPU with the torch image)."""

    model: Annotated[str, Field(max_length=512)] = Field(
        description="'package:<module>', 'wordllama:<config>', a path, or a sentence-transformers model name; "
        "empty: the engine's default (as v1alpha1's empty embedding.model, which converts to it).")


class RemoteEmbeddingSpec(SpecModel):
    """An OpenAI-compatible embeddings endpoint the engine calls."""

    url: Url = Field(description="OpenAI-compatible embeddings base URL ending in /v1.")
    api_key_secret_ref: SecretKeyRef | None = Field(None, description="Bearer token for url.")

    @model_validator(mode="after")
    def _http(self) -> RemoteEmbeddingSpec:
        if not _is_http(self.url):
            raise ValueError("embedding.remote.url must be an http:// or https:// URL")
        return self


class EmbeddingSpec(SpecModel):
    """The embedding model: run inside the engine (local) or called over HTTP (remote), as KAITO's v1beta1 spells
    it; neither = the engine's packaged default model. A change re-indexes every index to the new model in the
    background, without restarting the engine: the old versions serve until the new ones are built
    (status.indexes, the Reindexing condition; docs/versions.md)."""

    local: LocalEmbeddingSpec | None = Field(None, description="A model the engine runs. At most one of local/remote.")
    remote: RemoteEmbeddingSpec | None = Field(
        None, description="An OpenAI-compatible embeddings endpoint. At most one of local/remote.")

    @model_validator(mode="after")
    def _at_most_one(self) -> EmbeddingSpec:
        if self.local is not None and self.remote is not None:
            raise ValueError("at most one of embedding.local or embedding.remote may be set")
        return self

    @property
    def model(self) -> str | None:
        return self.local.model if self.local is not None else None

    @property
    def url(self) -> str | None:
        return self.remote.url if self.remote is not None else None

    @property
    def api_key_secret_ref(self) -> SecretKeyRef | None:
        return self.remote.api_key_secret_ref if self.remote is not None else None


class RetrievalSpec(SpecModel):
    context_token_ratio: float = Field(0.5, ge=CONTEXT_TOKEN_RATIO_MIN, le=CONTEXT_TOKEN_RATIO_MAX,
                                       description="Share of the free window given to context.")
    similarity_threshold: float = Field(
        0.3, ge=0.0, le=1.0,
        description="Minimum cosine similarity for a chunk to enter the prompt (0.3: see docs/retrieval.md).")
    no_context: Literal["answer", "refuse", "disclaim"] = Field(
        "answer", description="When no chunk passes similarityThreshold: 'answer' (the LLM answers as asked), "
        "'refuse' (a fixed message) or 'disclaim' (the answer plus a disclaimer); see docs/engine.md.")
    hybrid: bool = Field(True, description="Fuse dense and BM25 results.")
    rerank_model: Annotated[str, Field(max_length=512)] | None = Field(None, description="Cross-encoder; unset = none.")
    screen_indexes: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, max_length=64, description="Indexes (shell patterns, '*' = all) whose retrieved chunks are screened "
        "before the prompt: hidden characters stripped, prompt-injection phrasing kept out (docs/guardrails.md). A "
        "source's screen: true opts its documents in wherever they are.")


class EngineSpec(PodOptions):
    image: Annotated[str, Field(max_length=512)] | None = Field(
        None, description="Engine image; the operator's default when unset."
    )
    replicas: int = Field(
        1, ge=0, le=100,
        description="Engine pods. At most 1 with storage.vectorStore.type faiss (one ReadWriteOnce index volume, single "
        "writer); any number with postgres or milvus. Ignored while autoscaling is set.",
    )
    autoscaling: AutoscalingSpec | None = Field(
        None, description="Create an HPA for the engine; the operator then stops applying replicas."
    )
    resources: ResourceRequirements | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = Field(None, max_length=32)
    network_policy: EngineNetworkPolicySpec = Field(
        default_factory=EngineNetworkPolicySpec, json_schema_extra={"default": {}},
        description="Ingress to the engine's pods: on by default (the RAGEngine's namespace and its source "
        "syncs); networkPolicy.enabled: false opts out.",
    )


class HNSWSpec(SpecModel):
    """HNSW graph parameters of the external store's vector index (the engine's defaults when unset)."""

    m: int | None = Field(None, ge=4, le=128, description="Links per node.")
    ef_construction: int | None = Field(None, ge=8, le=4096, description="Build breadth (recall vs build time).")
    ef_search: int | None = Field(None, ge=8, le=4096, description="Search breadth (recall vs latency).")
    threshold: int | None = Field(
        None, ge=0, le=100_000_000,
        description="PostgreSQL: an index with more chunks than this gets its own HNSW index, built in one pass once "
                    "its writes pause (bulk loads are not slowed by it); smaller indexes are searched exactly. "
                    "Engine default 10000.")


class ConnectionSecretRef(SecretKeyRef):
    """The Secret key holding the store's DSN or URI (it carries credentials: never inline)."""

    key: Annotated[str, Field(min_length=1, max_length=253)] = Field("url", description="Key in the Secret.")


class VectorStoreSpec(SpecModel):
    """Where the indexes live: embedded FAISS on the engine's volume, or an external store shared by replicas."""

    type: Literal["faiss", "postgres", "milvus"] = Field(
        "faiss", description="faiss: embedded, one replica. postgres (pgvector) or milvus: several replicas, no volume."
    )
    connection_secret_ref: ConnectionSecretRef | None = Field(
        None, description="postgres/milvus: the Secret key with the DSN (postgresql://...) or Milvus URI."
    )
    prefix: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,39}$")] | None = Field(
        None, description="Schema / collection prefix; default: derived from the namespace and name (unique)."
    )
    hnsw: HNSWSpec = Field(default_factory=HNSWSpec, json_schema_extra={"default": {}})
    compression: Literal["none", "sq8"] | None = Field(
        None,
        description="faiss: 'sq8' keeps each HNSW index's vectors as 8-bit codes, a quarter of the memory for a "
                    "small loss of recall (docs/stores.md); engine default none.")
    keyword_index: Literal["memory", "database"] | None = Field(
        None,
        description="postgres: 'memory' answers unfiltered keyword searches from each engine replica's own BM25 "
                    "index of the indexes it serves, kept in step with every replica's writes (10 ms p50 at a "
                    "million chunks, about 600 bytes of engine memory per chunk); 'database' always asks "
                    "PostgreSQL's full-text search. Engine default memory.")

    @property
    def external(self) -> bool:
        return self.type != "faiss"

    @model_validator(mode="after")
    def _connection(self) -> VectorStoreSpec:
        if self.external and self.connection_secret_ref is None:
            raise ValueError("storage.vectorStore.connectionSecretRef is required for postgres and milvus")
        if not self.external and self.connection_secret_ref is not None:
            raise ValueError("storage.vectorStore.connectionSecretRef applies to postgres and milvus only")
        if self.external and self.compression not in (None, "none"):
            raise ValueError("storage.vectorStore.compression applies to faiss only")
        if self.type != "postgres" and self.hnsw.threshold is not None:
            raise ValueError("storage.vectorStore.hnsw.threshold applies to postgres only")
        if self.type != "postgres" and self.keyword_index is not None:
            raise ValueError("storage.vectorStore.keywordIndex applies to postgres only")
        return self


class SessionsSpec(SpecModel):
    """Where chat sessions, threads and uploads (bytes and ingestion jobs) live."""

    database_secret_ref: ConnectionSecretRef | None = Field(
        None, description="A Secret key with a PostgreSQL DSN. Default: the postgres vector store's DSN, else "
        "SQLite on the engine's volume. Required with storage.vectorStore.type milvus and more than one engine replica: "
        "replicas must share sessions and the upload queue.",
    )


class DataVolumeSpec(VolumeSpec):
    """The engine's PVC: FAISS indexes and journals, SQLite sessions and uploads, the embedding model cache."""

    reclaim_policy: Literal["Retain", "Delete"] = Field(
        "Retain",
        description="What happens to the engine's data volume and the model cache when the RAGEngine is deleted. "
        "Retain (default, as a StatefulSet's claims): the PVCs stay, and a RAGEngine created again with the same "
        "name adopts them, indexes and downloaded weights included. Delete: they go with the RAGEngine.",
    )


class StorageSpec(SpecModel):
    """Where the RAGEngine's data lives (KAITO's storage: its volume and its vector database): the engine's
    volume, the vector store that holds the indexes, and the database of sessions and uploads."""

    volume: DataVolumeSpec = Field(default_factory=DataVolumeSpec, json_schema_extra={"default": {}})
    vector_store: VectorStoreSpec = Field(default_factory=VectorStoreSpec, json_schema_extra={"default": {}})
    sessions: SessionsSpec = Field(default_factory=SessionsSpec, json_schema_extra={"default": {}})


PROMETHEUS_PEER: dict[str, Any] = {
    "namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}


class MonitoringSpec(SpecModel):
    """Prometheus scraping of vLLM's and the engine's /metrics, through the Prometheus operator's CRDs."""

    kind: Literal["ServiceMonitor", "PodMonitor"] = Field(
        "ServiceMonitor", description="One monitor per component, named like its Deployment (the CRD must be installed)."
    )
    interval: Annotated[str, Field(pattern=r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$", max_length=16)] = Field(
        "30s", description="Scrape interval."
    )
    labels: LabelMap | None = Field(
        None, description="Labels on the monitors, for Prometheus' serviceMonitorSelector / podMonitorSelector "
        "(e.g. release: kube-prometheus-stack).",
    )
    scrape_from: list[NetworkPolicyPeer] = Field(
        default_factory=lambda: [NetworkPolicyPeer.model_validate(PROMETHEUS_PEER)], min_length=1, max_length=16,
        json_schema_extra={"default": [PROMETHEUS_PEER]},
        description="Prometheus' pods, admitted by the NetworkPolicies to vLLM's port (which otherwise admits only "
        "the engine) and to the engine's (when engine.networkPolicy is set). Default: pods labelled "
        "app.kubernetes.io/name=prometheus in any namespace (the Prometheus operator's label).",
    )


class AuthSpec(SpecModel):
    """The engine's API key: required by default, generated by the operator unless a Secret is named."""

    enabled: bool = Field(
        True, description="The engine requires 'Authorization: Bearer <key>' on every call but /health, /ready "
        "and /metrics. false: anyone who reaches the engine reads, writes and deletes its indexes and sessions "
        "(the SecureDefaults condition turns False).",
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        None, description="The key. Unset: the operator generates one, once, in Secret <name>-api-key (key "
        "api-key); status.apiKeySecretRef names the Secret either way.",
    )

    @model_validator(mode="after")
    def _key_needs_auth(self) -> AuthSpec:
        if not self.enabled and self.api_key_secret_ref is not None:
            raise ValueError(AUTH_OFF_WITH_KEY)
        return self


class GuardrailsSpec(SpecModel):
    """KAITO's spec.guardrails: the output policy (KAITO's guardrails.yaml) on every answer of the engine."""

    enabled: bool = Field(False, description="Apply the output policy to chat completions and session answers, "
                          "JSON and streams.")
    config_map_ref: LocalObjectReference | None = Field(
        None, description="A ConfigMap in the RAGEngine's namespace whose key guardrails.yaml is the policy; mounted "
        "as a volume, so an edit reaches the engine within a minute or so, without a restart. Unset: the chart's "
        "default policy, in ConfigMap <name>-guardrails.")
    fail_open: bool = Field(
        False, description="With no usable policy (or a scanner failing): false refuses answers (503), true sends "
        "them unscreened, saying so. A bad edit never matters while a good policy was loaded: it keeps serving.")


class MCPSpec(SpecModel):
    """The engine's Model Context Protocol server at /mcp (docs/mcp.md): agents take the indexes as tools."""

    enabled: bool = Field(
        True, description="Serve /mcp on the engine's Service port: the tools search, fetch and list_indexes and the "
        "documents as resources, behind the same keys, ServiceAccounts and document ACLs as every other route.")
    descriptions: dict[str, Annotated[str, Field(max_length=1024)]] | None = Field(
        None, max_length=256, description="Index name -> what it holds, in a sentence: agents read it in the tools' "
        "descriptions to pick an index (unset for an index: its vector store's description, if any).")


class ConsoleSpec(SpecModel):
    """The console: the engine's own web page at /ui/ (docs/console.md)."""

    enabled: bool = Field(
        True, description="Serve the console at /ui/ on the engine's port. Its files are open; everything it shows "
        "comes from the API with the key the user signs in with, under the same access rules as any client.")


class TracingSpec(SpecModel):
    """OpenTelemetry traces of answers, ingestion and source syncs (docs/observability.md)."""

    endpoint: Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$", max_length=512)] = Field(
        description="The OTLP receiver (an OpenTelemetry Collector, Tempo, Jaeger): http://host:4317 for gRPC, or the "
        "full URL of /v1/traces for http/protobuf. Rendered as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT for the engine and "
        "the sync workers, and as vLLM's --otlp-traces-endpoint.")
    protocol: Literal["grpc", "http/protobuf"] = Field(
        "grpc", description="OTLP transport (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL); vLLM's default is grpc.")
    sampling_ratio: float = Field(
        1.0, ge=0.0, le=1.0, description="Share of new traces recorded (parentbased_traceidratio): a request that "
        "comes with a sampled traceparent is recorded whatever the ratio, and vLLM follows the engine's decision.")


class ObservabilitySpec(SpecModel):
    """What the RAGEngine tells about itself: Prometheus scraping (metrics) and OpenTelemetry traces (tracing)."""

    metrics: MonitoringSpec | None = Field(
        None, description="Render a ServiceMonitor or PodMonitor for vLLM and the engine; unset: none."
    )
    tracing: TracingSpec | None = Field(None, description="OpenTelemetry traces; unset: none are exported.")


AUTH_OFF_WITH_KEY = "auth.apiKeySecretRef needs auth.enabled: a key the engine would not check is a mistake"

# Five cron fields (minute hour day-of-month month day-of-week) of digits, '*', ',', '-' and '/', or a macro.
CRON = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([0-9*,/-]+ ){4}[0-9*,/-]+)$"


class BackupVolumeSpec(SpecModel):
    """Where the backups go: an existing PVC (claimName), or one the operator creates (<name>-backup)."""

    claim_name: Name | None = Field(None, description="An existing PersistentVolumeClaim; size and class then unused.")
    size: Size = Field("10Gi", description="The created claim's size (it can grow, never shrink).")
    storage_class_name: Annotated[str, Field(max_length=253)] | None = Field(
        None, description="The created claim's StorageClass; the cluster default when unset.")


class BackupSpec(SpecModel):
    """A CronJob that exports every index to a volume (GET /indexes/{name}/export: portable, compressed,
    checksummed files that POST /indexes/{name}/import or `ragengine import` restores on any store)."""

    schedule: Annotated[str, Field(max_length=128, pattern=CRON)] = Field(
        description="When, as a cron schedule (e.g. '0 3 * * *') in the CronJob's time zone (the controller's, UTC "
        "by default).")
    retention: int = Field(7, ge=1, le=1000, description="Export files kept per index (the newest).")
    volume: BackupVolumeSpec = Field(default_factory=BackupVolumeSpec, json_schema_extra={"default": {}})


class RAGEngineSpec(SpecModel):
    """Desired state of a RAGEngine: inference (optional), embedding, retrieval, engine, storage, auth, access."""

    inference: InferenceSpec | None = Field(
        None, description="Generation backend; omit for retrieval-only (extractive answers)."
    )
    embedding: EmbeddingSpec = Field(default_factory=EmbeddingSpec, json_schema_extra={"default": {}})
    retrieval: RetrievalSpec = Field(default_factory=RetrievalSpec, json_schema_extra={"default": {}})
    engine: EngineSpec = Field(default_factory=EngineSpec, json_schema_extra={"default": {}})
    storage: StorageSpec = Field(default_factory=StorageSpec, json_schema_extra={"default": {}})
    auth: AuthSpec = Field(default_factory=AuthSpec, json_schema_extra={"default": {}})
    observability: ObservabilitySpec = Field(default_factory=ObservabilitySpec, json_schema_extra={"default": {}})
    access: AccessSpec | None = Field(
        None, description="Principals (keys, ServiceAccounts), roles, index patterns, groups and rate limits; rendered "
        "into the engine's access file (docs/access.md).")
    backup: BackupSpec | None = Field(
        None, description="Export every index on a schedule to a volume (a CronJob running the engine image's "
        "`ragengine export --all`); unset: none.")
    guardrails: GuardrailsSpec = Field(default_factory=GuardrailsSpec, json_schema_extra={"default": {}})
    mcp: MCPSpec = Field(default_factory=MCPSpec, json_schema_extra={"default": {}})
    console: ConsoleSpec = Field(default_factory=ConsoleSpec, json_schema_extra={"default": {}})
    evaluation: EvaluationSpec | None = Field(
        None, description="Score an index on a golden set on a schedule and before every re-index swaps "
        "(docs/evaluation.md); unset: none.")
    sources: Annotated[list[Source], AfterValidator(unique_names)] = Field(
        default_factory=list, max_length=32,
        description="Documents the indexes hold, synced by the operator from ConfigMaps, git repositories or "
        "HTTP URLs (docs/sources.md). Each index then holds exactly its sources' documents (plus any added by API).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    indexes: Annotated[list[IndexSettings], AfterValidator(unique_indexes)] = Field(
        default_factory=list, max_length=64,
        description="Settings of the indexes that sources fill, shared by all their sources: chunking and how files "
        "are read (OCR languages, formats); a source's own settings win (docs/sources.md).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @model_validator(mode="after")
    def _index_settings(self) -> RAGEngineSpec:
        effective_sources(self.sources, self.indexes)  # raises on two chunkings for one index
        return self

    @property
    def runs_vllm(self) -> bool:
        return self.inference is not None and self.inference.model is not None

    @property
    def evaluation_index(self) -> str | None:
        """The index spec.evaluation scores (its own, else its golden set's source's)."""
        ev = self.evaluation
        if ev is None:
            return None
        if ev.index is not None:
            return ev.index
        source = next((s for s in self.sources if ev.golden_set.source and s.name == ev.golden_set.source.name), None)
        return source.index_name if source is not None else None

    @model_validator(mode="after")
    def _evaluation_source(self) -> RAGEngineSpec:
        ref = self.evaluation.golden_set.source if self.evaluation is not None else None
        if ref is not None:
            found = next((s for s in self.sources if s.name == ref.name), None)
            if found is None:
                raise ValueError(f"evaluation.goldenSet.source names {ref.name!r}, which is not a spec.sources entry")
            if found.config_map is not None:
                raise ValueError("evaluation.goldenSet.source must be a git or http source (for a ConfigMap, use "
                                 "goldenSet.configMapRef)")
        return self

    @model_validator(mode="after")
    def _single_writer(self) -> RAGEngineSpec:
        several = self.engine.replicas > 1 or self.engine.autoscaling is not None
        store = self.storage.vector_store
        if not store.external and several:
            raise ValueError(FAISS_ONE_REPLICA)
        if store.type == "milvus" and several and self.storage.sessions.database_secret_ref is None:
            raise ValueError(MILVUS_SHARED_SESSIONS)
        return self


MILVUS_SHARED_SESSIONS = (
    "engine.replicas above 1 and engine.autoscaling with storage.vectorStore.type milvus need storage.sessions.databaseSecretRef "
    "(a PostgreSQL DSN): replicas must share sessions, threads and the upload queue"
)
FAISS_ONE_REPLICA = (
    "engine.replicas above 1 and engine.autoscaling need storage.vectorStore.type postgres or milvus: the faiss index "
    "lives on one ReadWriteOnce volume with a single writer"
)
