"""Operator configuration (pydantic-settings, env prefix RAGENGINE_OPERATOR_), loaded once at start."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAGENGINE_OPERATOR_", extra="ignore")

    engine_image: str = Field("ghcr.io/ragengine/engine:0.1.0", description="Engine image when spec.engine.image is unset.")
    vllm_image: str = Field("vllm/vllm-openai:v0.10.2", description="vLLM image when spec.inference.image is unset.")
    resync_seconds: float = Field(300.0, gt=0, description="Level-based re-reconcile period per RAGEngine.")
    resync_jitter: float = Field(
        0.2, ge=0, le=1, description="Each resync waits resync_seconds * (1 + up to this share), so objects spread out."
    )
    probe_external_inference: bool = Field(
        True, description="url mode: check that inference.url answers GET /models (and serves the model) for status."
    )
    probe_engine_readiness: bool = Field(
        True, description="Ask a running but unready engine pod's GET /ready why, for EngineReady's message."
    )
    metrics_port: int = Field(8080, ge=0, le=65535, description="Prometheus /metrics port; 0 = off.")
    liveness_port: int = Field(8081, ge=0, le=65535, description="kopf liveness endpoint /healthz; 0 = off.")
    pod_namespace: str | None = Field(
        None, description="The operator's own namespace (the chart sets it from the downward API): an engine "
        "NetworkPolicy admits the operator's pods there. Unset (outside a cluster): no such peer."
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict, description="The operator pods' selector labels (JSON in the environment), with pod_namespace."
    )
    max_workers: int = Field(16, ge=1, description="Threads running sync handlers (reconciles in parallel).")
    post_events: bool = Field(True, description="Write Kubernetes Events on condition transitions.")
    # Fault injection for the crash-recovery test: exit hard after this many server-side applies.
    crash_after_applies: int | None = Field(None, ge=1)
    watch_timeout_seconds: int = Field(
        120, ge=1, description="Server-side watch timeout: idle watches are re-opened (kopf #698/#204)."
    )
    # Document sources (spec.sources, docs/sources.md): synced by the operator through the engine's API.
    engine_url: str | None = Field(
        None, description="Base URL of an engine, '{name}' and '{namespace}' filled in; default: its Service "
        "(http://<name>.<namespace>.svc.cluster.local). Set it when the operator runs outside the cluster.",
    )
    source_workers: int = Field(4, ge=1, description="Source syncs running at once (each in its own thread).")
    sources_cache_dir: str = Field(
        "/tmp/ragengine-sources", description="Git clones of sources (a cache: losing it costs one fetch)."
    )
    source_workers_per_namespace: int = Field(
        2, ge=1, description="Source syncs of one namespace running at once, within source_workers: a tenant with "
        "many slow sources cannot take every worker.",
    )
    sources_cache_max_bytes: int = Field(
        1024**3, ge=0, description="Size budget of the git cache: after each sync the least recently used clones "
        "are removed until it fits (the chart's /tmp is 2Gi).",
    )
    # Egress rules of source fetches and of the inference URL probe (sources/egress.py, docs/sources.md).
    sources_egress_allow: list[str] = Field(
        default_factory=list, description="CIDRs and host names (exact, or *.example.com) that source fetches and the "
        "LLM probe may reach although the egress rules refuse them by default (loopback, link-local, private, "
        "CGNAT, *.svc, *.cluster.local, localhost). JSON list in the environment.",
    )
    sources_cluster_cidrs: list[str] = Field(
        default_factory=list, description="The cluster's Service and Pod ranges: refused even inside an allowlisted "
        "CIDR (only an allowlisted host name opens them). JSON list in the environment.",
    )
    cluster_domain: str = Field("cluster.local", description="The cluster's DNS domain: *.<domain> is refused.")
    sources_fetch_timeout_seconds: float = Field(
        300.0, gt=0, description="Deadline of one fetch of one source (every URL or the whole git fetch and read).")
    sources_max_file_bytes: int = Field(
        20 * 1024 * 1024, ge=1, description="Largest file a source may hold, counted decoded; larger files are skipped.")
    sources_max_files: int = Field(
        20_000, ge=1, description="Ceiling of a source's spec.maxFiles (the spec's value is used up to it).")
    sources_max_bytes: int = Field(
        512 * 1024 * 1024, ge=1, description="Ceiling of a source's spec.maxSize in bytes (the spec's value is used up to it).")
