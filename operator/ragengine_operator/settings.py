"""Operator configuration (pydantic-settings, env prefix RAGENGINE_OPERATOR_), loaded once at start."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .constants import DEFAULT_VLLM_IMAGE


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAGENGINE_OPERATOR_", extra="ignore")

    engine_image: str = Field("ghcr.io/ragengine/engine:0.1.0", description="Engine image when spec.engine.image is unset.")
    vllm_image: str = Field(DEFAULT_VLLM_IMAGE, description="vLLM image when spec.inference.image is unset.")
    cluster_domain: str = Field(
        "cluster.local", pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$",
        description="The cluster's DNS domain, in the Services' URLs (the endpoint, the engine's LLM URL). Empty: "
        "<service>.<namespace>.svc, which the pods' DNS search path completes under any domain.",
    )
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
    addon_recheck_seconds: float = Field(
        120.0, gt=0, description="How long the answer 'does the cluster serve this add-on kind' (the Prometheus "
        "operator's ServiceMonitor/PodMonitor, KEDA's ScaledObject) is trusted: a CRD installed later is used "
        "within this.",
    )
    post_events: bool = Field(True, description="Write Kubernetes Events on condition transitions.")
    # Fault injection for the crash-recovery test: exit hard after this many server-side applies.
    crash_after_applies: int | None = Field(None, ge=1)
    watch_timeout_seconds: int = Field(
        120, ge=1, description="Server-side watch timeout: idle watches are re-opened (kopf #698/#204)."
    )
    # Document sources (spec.sources, docs/sources.md): synced by the operator through the engine's API.
    engine_url: str | None = Field(
        None, description="Base URL of an engine, '{name}' and '{namespace}' filled in; default: its Service "
        "(http://<name>.<namespace>.svc.<cluster_domain>). Set it when the operator runs outside the cluster.",
    )
    source_workers: int = Field(4, ge=1, description="Source syncs running at once (each in its own thread).")
    sources_cache_dir: str = Field(
        "/tmp/ragengine-sources", description="Git clones of sources (a cache: losing it costs one fetch)."
    )
