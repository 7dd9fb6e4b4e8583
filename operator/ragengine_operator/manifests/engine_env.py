"""spec -> the engine container's env, with every name coming from ragengine.settings.EngineSettings.

The operator never spells a RAGENGINE_* name: values go through EngineSettings.to_env and secrets
through EngineSettings.env_name, so a renamed engine field breaks here (and in the contract test),
not silently in a running pod (KAITO #2365). SETTINGS is the one table of the engine settings the operator
sets (a new one is one line there): each field, the spec paths it reads and its value. SPEC_TO_ENGINE (derived
from it) lists every spec field that reaches the engine as a value, SECRET_TO_ENGINE those that reach it as a
Secret; OPERATOR_ONLY lists the spec fields used for other children. The contract test checks that together
they cover every leaf of RAGEngineSpec.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any

from ragengine.observability.tracing import tracing_env
from ragengine.settings import DEFAULT_EMBEDDING_MODEL, EngineSettings, embedding_digest

from .. import constants as c
from ..spec import AuthSpec, RAGEngineSpec, SecretKeyRef
from .guardrails import POLICY_PATH
from .labels import Owner
from .status_key import status_key_sha256

# After SIGTERM the engine serves this long, telling each client to close its connection: uvicorn's
# keep-alive timeout, so no connection is left that was never told (ragengine/shutdown.py). The pod's
# grace period covers the preStop sleep, this and uvicorn's 30 s graceful shutdown.
SHUTDOWN_DRAIN_S = 5
# The engine pod's grace period: the preStop sleep, the drain, uvicorn's 30 s graceful shutdown and the final
# snapshot. A FAISS pod's replacement holds its writes until the old process is gone (ragengine/handover.py):
# at the latest the grace period after the old pod was deleted, then its own start; a minute covers that.
TERMINATION_GRACE_S = 60
HANDOVER_WAIT_S = TERMINATION_GRACE_S + 60


@dataclasses.dataclass(frozen=True)
class Setting:
    """One EngineSettings field the operator sets: the spec paths it reads (none: the operator decides it) and
    its value for an owner and a spec (None: the engine's default, no env variable)."""
    field: str
    spec: tuple[str, ...]
    value: Callable[[Owner, RAGEngineSpec], Any]


# Every engine setting the operator renders, written once: engine_values and SPEC_TO_ENGINE both come from it.
SETTINGS: tuple[Setting, ...] = (
    Setting("vector_store", ("storage.vectorStore.type",), lambda o, s: s.storage.vector_store.type),
    Setting("vector_store_prefix", ("storage.vectorStore.prefix",),
            lambda o, s: store_prefix(o, s) if s.storage.vector_store.external else None),
    # HNSW: the external store's index, and FAISS's too once an index passes hnsw_threshold
    Setting("hnsw_m", ("storage.vectorStore.hnsw.m",), lambda o, s: s.storage.vector_store.hnsw.m),
    Setting("hnsw_ef_construction", ("storage.vectorStore.hnsw.efConstruction",),
            lambda o, s: s.storage.vector_store.hnsw.ef_construction),
    Setting("hnsw_ef_search", ("storage.vectorStore.hnsw.efSearch",), lambda o, s: s.storage.vector_store.hnsw.ef_search),
    Setting("store_hnsw_threshold", ("storage.vectorStore.hnsw.threshold",),
            lambda o, s: s.storage.vector_store.hnsw.threshold),
    Setting("vector_compression", ("storage.vectorStore.compression",), lambda o, s: s.storage.vector_store.compression),
    Setting("store_keyword_index", ("storage.vectorStore.keywordIndex",),
            lambda o, s: s.storage.vector_store.keyword_index),
    # in model mode the in-cluster vLLM Service's URL
    Setting("llm_url", ("inference.url", "inference.model"), lambda o, s: llm_url(o, s)),
    Setting("llm_model", ("inference.servedModelName", "inference.model"), lambda o, s: served_model(s)),
    Setting("context_window", ("inference.contextWindow",), lambda o, s: s.inference.context_window if s.inference else None),
    # spec.embedding, watched (a ConfigMap: OPERATOR_ONLY); on the data volume, a model is downloaded once
    Setting("embedding_file", (), lambda o, s: f"{c.ENGINE_EMBEDDING_DIR}/{c.ENGINE_EMBEDDING_FILE}"),
    Setting("embedding_cache_dir", (), lambda o, s: c.ENGINE_MODEL_CACHE_DIR),
    Setting("context_token_ratio", ("retrieval.contextTokenRatio",), lambda o, s: s.retrieval.context_token_ratio),
    Setting("similarity_threshold", ("retrieval.similarityThreshold",), lambda o, s: s.retrieval.similarity_threshold),
    Setting("no_context", ("retrieval.noContext",), lambda o, s: s.retrieval.no_context),
    Setting("hybrid", ("retrieval.hybrid",), lambda o, s: s.retrieval.hybrid),
    Setting("rerank_model", ("retrieval.rerankModel",), lambda o, s: s.retrieval.rerank_model),
    Setting("screen_indexes", ("retrieval.screenIndexes",), lambda o, s: s.retrieval.screen_indexes),
    # the mounted ConfigMap's file (manifests/guardrails.py)
    Setting("guardrails_policy", ("guardrails.enabled",), lambda o, s: POLICY_PATH if s.guardrails.enabled else None),
    Setting("guardrails_fail_open", ("guardrails.failOpen",),
            lambda o, s: s.guardrails.fail_open if s.guardrails.enabled else None),
    # spec.evaluation, watched (manifests/evaluation.py; its fields are OPERATOR_ONLY)
    Setting("evaluation_file", (),
            lambda o, s: f"{c.ENGINE_EVALUATION_DIR}/{c.ENGINE_EVALUATION_FILE}" if s.evaluation else None),
    # the engine's default is on: nothing while on, so an operator upgrade does not roll every engine
    Setting("mcp_enabled", ("mcp.enabled",), lambda o, s: None if s.mcp.enabled else False),
    Setting("mcp_descriptions", ("mcp.descriptions",), lambda o, s: s.mcp.descriptions or None),
    Setting("console_enabled", ("console.enabled",), lambda o, s: None if s.console.enabled else False),
    # kept-alive clients move to another replica before the engine closes (ragengine/shutdown.py)
    Setting("shutdown_drain_seconds", (), lambda o, s: SHUTDOWN_DRAIN_S),
    # FAISS: the new pod's stand-by holds writes until the old pod let go of the index volume (RollingUpdate)
    Setting("handover_wait_seconds", (), lambda o, s: None if s.storage.vector_store.external else HANDOVER_WAIT_S),
    # the operator's read of GET /health, when the engine requires a key (manifests/status_key.py)
    Setting("status_key_sha256", (), lambda o, s: status_key_sha256(o) if s.auth.enabled else None),
)
# spec path -> the EngineSettings field it reaches as a value (a path two fields read names the first of them).
SPEC_TO_ENGINE = {path: setting.field for setting in reversed(SETTINGS) for path in setting.spec}
# spec path of a SecretKeyRef -> EngineSettings field (valueFrom.secretKeyRef).
SECRET_TO_ENGINE = {
    "inference.apiKeySecretRef": "llm_api_key",
    "embedding.remote.apiKeySecretRef": "embedding_api_key",
    "auth.apiKeySecretRef": "api_key",
    "storage.vectorStore.connectionSecretRef": "vector_store_url",  # postgres: also database_url (sessions shared)
    "storage.sessions.databaseSecretRef": "database_url",
}
# spec paths that shape other objects (vLLM, volumes, the engine Deployment), not engine settings.
OPERATOR_ONLY = {
    # the engine's embedding file (a ConfigMap it watches: embedding_file), so a new model re-indexes without
    # a restart; tests/operator/test_engine_env_contract.py parses it back with the engine's own reader
    "embedding.local.model", "embedding.remote.url",
    # the backup CronJob and its volume (manifests/backup.py)
    "backup.schedule", "backup.retention", "backup.volume.claimName", "backup.volume.size",
    "backup.volume.storageClassName",
    "inference.image", "inference.gpus", "inference.replicas", "inference.args", "inference.nodeSelector",
    "inference.tolerations", "inference.resources", "inference.modelCache.size",
    "inference.modelCache.storageClassName", "inference.modelCache.accessMode", "inference.hfTokenSecretRef",
    "engine.image", "engine.replicas", "engine.resources", "storage.volume.size", "storage.volume.storageClassName",
    "inference.autoscaling.minReplicas", "inference.autoscaling.maxReplicas",
    "inference.autoscaling.targetCPUUtilizationPercentage", "inference.startupTimeout",
    *(f"{component}.{field}" for component in ("inference", "engine") for field in (
        "affinity", "env", "imagePullSecrets", "podAnnotations", "podLabels", "priorityClassName",
        "runtimeClassName", "serviceAccountName", "topologySpreadConstraints")),
    "engine.nodeSelector", "engine.tolerations", "inference.gpuResourceName",
    "engine.autoscaling.minReplicas", "engine.autoscaling.maxReplicas", "engine.autoscaling.targetCPUUtilizationPercentage",
    "storage.volume.reclaimPolicy",  # the PVCs' owner references
    "auth.enabled",  # whether api_key is set at all, from spec.auth's Secret or the generated one
    "engine.networkPolicy.enabled",
    "guardrails.configMapRef.name",  # the policy volume (manifests/guardrails.py)
    # the engine's evaluation file and the golden set's volume (manifests/evaluation.py), read by the engine
    "evaluation.index", "evaluation.topK", "evaluation.schedule", "evaluation.gate.metric", "evaluation.gate.minimum",
    "evaluation.gate.maxRegression", "evaluation.goldenSet.configMapRef.name", "evaluation.goldenSet.configMapRef.key",
    "evaluation.goldenSet.source.name", "evaluation.goldenSet.source.path",
    "evaluation.dropThreshold",  # the operator's Event on a score drop (reconcile/evaluation.py)
    # vLLM's command line and its autoscaler (manifests/inference.py)
    "inference.revision", "inference.toolCallParser", "inference.autoscaling.metric",
    "inference.autoscaling.targetRequestsWaiting", "inference.autoscaling.keda.serverAddress",
    # the ServiceMonitors / PodMonitors and the NetworkPolicies' scrape peers (manifests/monitoring.py)
    "observability.metrics.kind", "observability.metrics.interval", "observability.metrics.labels",
    *(f"observability.metrics.scrapeFrom.{field}" for field in (
        "ipBlock.cidr", "ipBlock.except", "namespaceSelector.matchExpressions", "namespaceSelector.matchLabels",
        "podSelector.matchExpressions", "podSelector.matchLabels")),
    # OTEL_* variables for the engine, vLLM and the sync workers, not engine settings (otel_env below)
    "observability.tracing.endpoint", "observability.tracing.protocol", "observability.tracing.samplingRatio",
    # the engine's NetworkPolicy (manifests/engine.py)
    *(f"engine.networkPolicy.allowFrom.{field}" for field in (
        "ipBlock.cidr", "ipBlock.except", "namespaceSelector.matchExpressions", "namespaceSelector.matchLabels",
        "podSelector.matchExpressions", "podSelector.matchLabels")),
    # rendered into the engine's access file, a Secret mounted into the engine (manifests/access.py)
    *(f"access.{field}" for field in (
        "audience", "defaultLimits.requestsPerMinute", "defaultLimits.tokensPerMinute",
        *(f"{kind}.{leaf}" for kind in ("keys", "serviceAccounts") for leaf in (
            "indexes", "role", "groups", "limits.requestsPerMinute", "limits.tokensPerMinute")),
        "keys.name", "keys.keySecretRef", "serviceAccounts.namespace",
        "serviceAccounts.name")),
    # synced by the operator through the engine's API (syncer/runner.py)
    *(f"sources.{field}" for field in (
        "name", "index", "interval", "metadata", "acl", "screen", "chunking.chunkSize", "chunking.chunkOverlap", "configMap.name",
        "configMap.keys", "git.url", "git.ref", "git.paths", "git.secretRef.name", "http.urls", "http.secretRef.name",
        "maxFiles", "maxSize", "chunking.contextual", "ingestion.ocrLanguages", "ingestion.formats", "aclRules",
        "s3.endpoint", "s3.bucket", "s3.prefix", "s3.region", "s3.paths", "s3.pathStyle", "s3.secretRef.name",
        "s3.serviceAccountName", "webhook.type", "webhook.secretRef.name")),
    # each source of an index with its index's settings (spec/sources.py effective_sources)
    *(f"indexes.{field}" for field in (
        "name", "chunking.chunkSize", "chunking.chunkOverlap", "chunking.contextual", "ingestion.ocrLanguages",
        "ingestion.formats")),
}


def inference_service_url(owner: Owner) -> str:
    return f"http://{owner.service_host(owner.child('inference'))}:{c.VLLM_PORT}/v1"


def llm_url(owner: Owner, spec: RAGEngineSpec) -> str | None:
    if spec.inference is None:
        return None
    return spec.inference.url or inference_service_url(owner)


def served_model(spec: RAGEngineSpec) -> str | None:
    inf = spec.inference
    return None if inf is None else (inf.served_model_name or inf.model)


def store_prefix(owner: Owner, spec: RAGEngineSpec) -> str:
    """The schema / collection prefix: spec.storage.vectorStore.prefix, else one unique to this RAGEngine
    (namespace and name hashed in), so RAGEngines sharing one database never share tables."""
    if spec.storage.vector_store.prefix:
        return spec.storage.vector_store.prefix
    digest = hashlib.sha256(f"{owner.namespace}/{owner.name}".encode()).hexdigest()[:8]
    return f"rag_{owner.name[:24].replace('-', '_')}_{digest}"


def engine_values(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    """EngineSettings field -> value for everything the spec decides (None = engine default)."""
    return {setting.field: setting.value(owner, spec) for setting in SETTINGS}


def embedding_target(spec: RAGEngineSpec) -> tuple[str, str | None]:
    """(model, url) the engine embeds with: spec.embedding, the engine's default model when it names none."""
    return spec.embedding.model or DEFAULT_EMBEDDING_MODEL, spec.embedding.url


def embedding_file(spec: RAGEngineSpec, generation: int | None) -> dict[str, Any]:
    """The engine's embedding file (ragengine.embedding.pool.read_target reads it). ``generation``: the
    RAGEngine's generation when spec.embedding last changed, so a replica whose copy of the file is older
    never undoes a newer model (the kubelet updates each node's copy in its own time)."""
    return {"model": spec.embedding.model, "url": spec.embedding.url, "generation": generation}


def embedding_generation(current: dict[str, Any] | None, spec: RAGEngineSpec, generation: int | None) -> int | None:
    """The generation for the embedding file: the one it has while spec.embedding is what it says (a change
    elsewhere in the spec must not look like a new model), else the RAGEngine's current one."""
    try:
        held = json.loads(((current or {}).get("data") or {}).get(c.ENGINE_EMBEDDING_FILE, ""))
    except ValueError:
        held = None
    if isinstance(held, dict) and (held.get("model"), held.get("url")) == (spec.embedding.model, spec.embedding.url):
        return held.get("generation") if isinstance(held.get("generation"), int) else generation
    return generation


def target_digest(spec: RAGEngineSpec) -> str:
    """What the engine's /health reports (embedding.target) once it has picked up spec.embedding."""
    return embedding_digest(*embedding_target(spec))


def inference_api_key_ref(owner: Owner) -> SecretKeyRef:
    """The operator-generated key of the in-cluster vLLM (vLLM --api-key, the engine's llm_api_key)."""
    return SecretKeyRef(name=owner.child("inference-api-key"), key="api-key")


def generated_engine_key_ref(owner: Owner) -> SecretKeyRef:
    """The operator-generated key of the engine (auth on, no Secret named): what clients send."""
    return SecretKeyRef(name=owner.child("api-key"), key="api-key")


def engine_api_key_ref(owner: Owner, auth: AuthSpec) -> SecretKeyRef | None:
    """The engine's API key: spec.auth's Secret, else the generated one; None when auth is off."""
    if not auth.enabled:
        return None
    return auth.api_key_secret_ref or generated_engine_key_ref(owner)


def generated_key_refs(owner: Owner, spec: RAGEngineSpec) -> list[SecretKeyRef]:
    """The keys the operator creates for this spec (once each, never rotated by it)."""
    refs = [inference_api_key_ref(owner)] if spec.runs_vllm else []
    if spec.auth.enabled and spec.auth.api_key_secret_ref is None:
        refs.append(generated_engine_key_ref(owner))
    return refs


def secret_refs(spec: RAGEngineSpec, owner: Owner | None = None) -> dict[str, Any]:
    """EngineSettings field -> SecretKeyRef for the secrets the spec names (and, with an owner, the
    operator-generated keys: vLLM's in model mode, the engine's when auth names no Secret)."""
    llm_key = spec.inference.api_key_secret_ref if spec.inference else None
    if spec.runs_vllm and owner is not None:
        llm_key = inference_api_key_ref(owner)
    api_key = spec.auth.api_key_secret_ref if owner is None else engine_api_key_ref(owner, spec.auth)
    refs = {
        "llm_api_key": llm_key,
        "embedding_api_key": spec.embedding.api_key_secret_ref,
        "api_key": api_key,
        "vector_store_url": spec.storage.vector_store.connection_secret_ref,
        # sessions, threads and uploads in PostgreSQL (their own, else the store's), so every replica sees them
        "database_url": spec.storage.sessions.database_secret_ref or (
            spec.storage.vector_store.connection_secret_ref if spec.storage.vector_store.type == "postgres" else None),
    }
    return {k: v for k, v in refs.items() if v is not None}


def otel_env(owner: Owner, spec: RAGEngineSpec, service_name: str) -> list[dict[str, Any]]:
    """The standard OTEL_* variables that send a component's traces where spec.observability.tracing says
    (none without it); the resource names the RAGEngine, so one collector tells RAGEngines apart."""
    t = spec.observability.tracing
    if t is None:
        return []
    values = tracing_env(t.endpoint, protocol=t.protocol, sampling_ratio=t.sampling_ratio, service_name=service_name,
                         resource={"k8s.namespace.name": owner.namespace, "ragengine.name": owner.name})
    return [{"name": k, "value": v} for k, v in sorted(values.items())]


def engine_env(owner: Owner, spec: RAGEngineSpec) -> list[dict[str, Any]]:
    values = EngineSettings.to_env(engine_values(owner, spec))
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(values.items())]
    env += otel_env(owner, spec, "ragengine")
    for field, ref in sorted(secret_refs(spec, owner).items()):
        env.append(
            {"name": EngineSettings.env_name(field), "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        )
    return env
