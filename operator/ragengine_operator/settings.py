"""Operator configuration (pydantic-settings, env prefix RAGENGINE_OPERATOR_), loaded once at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from .constants import DEFAULT_VLLM_IMAGE


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAGENGINE_OPERATOR_", extra="ignore")

    engine_image: str = Field(
        "ghcr.io/ragengine/ragengine-engine:0.1.0", description="Engine image when spec.engine.image is unset.")
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
    probe_engine_indexes: bool = Field(
        True, description="Ask the engine's GET /health (engine_url, else its Service) how its indexes stand, for "
        "status.indexes and the Reindexing condition: on every reconcile, and on child events while a change of "
        "embedding model is pending. The engine's NetworkPolicy must admit the operator's namespace for it.",
    )
    status_key_secret: SecretStr | None = Field(
        None, min_length=32, description="Derives each engine's status key (HMAC-SHA256 of the RAGEngine's uid): the "
        "operator sends it on GET /health, and the engine, which holds only its SHA-256, shows it the indexes and "
        "versions it shows an admin. Unset: an engine that requires a key shows the operator none (status.indexes "
        "stays empty). The chart sets it from a Secret in its namespace (statusKey.*).",
    )
    metrics_port: int = Field(8080, ge=0, le=65535, description="Prometheus /metrics port; 0 = off.")
    liveness_port: int = Field(
        8081, ge=0, le=65535, description="Plain HTTP /healthz (liveness) and /readyz (serving conversions), on every "
        "replica; 0 = off.")
    # The CRD's conversion webhook (conversion/, docs/upgrades.md): every replica serves it.
    webhook_port: int = Field(0, ge=0, le=65535, description="HTTPS port of POST /convert; 0 = no webhook.")
    webhook_secret: str | None = Field(
        None, description="The Secret (in pod_namespace) with the webhook's certificates: tls.crt, tls.key, ca.crt.")
    webhook_service: str | None = Field(
        None, description="The webhook's Service (in pod_namespace). Set: this operator owns the CRD's conversion "
        "stanza (points it at this Service with the CA) and rewrites stored RAGEngines at the storage version. "
        "Exactly one operator per cluster should (the chart's release that installs the CRD).")
    webhook_cert_manager: bool = Field(
        False, description="cert-manager writes webhook_secret; the operator only reads it (and its ca.crt).")
    webhook_cert_check_seconds: float = Field(
        3600.0, gt=0, description="How often each replica re-reads the certificates (renewal, rotation).")
    pod_namespace: str | None = Field(
        None, description="This pod's namespace (downward API); default: the ServiceAccount's namespace file.")
    pod_name: str | None = Field(None, description="This pod's name (downward API); default: the host name.")
    # Leader election (leader.py): only the leader runs kopf; the others serve the webhook and wait.
    leader_election: bool = Field(False, description="Run kopf only while holding the Lease (the chart: on).")
    lease_name: str = Field("ragengine-operator", description="The Lease (in pod_namespace).")
    lease_duration_seconds: float = Field(10.0, gt=1, description="A silent leader's lease is taken over after this.")
    lease_renew_deadline_seconds: float = Field(7.0, gt=1, description="A leader that cannot renew for this stops.")
    lease_retry_period_seconds: float = Field(1.0, gt=0, description="Renew / try period.")
    legacy_pod_selector: str | None = Field(
        None, description="Label selector (in pod_namespace) of operator pods that predate leader election: a new "
        "leader waits until none runs (an upgrade from a release without it), so two never reconcile at once.")
    reachability_seconds: float = Field(
        30.0, gt=0, description="How often an external inference URL is probed between resyncs: an outage or a "
        "recovery reaches InferenceReady within this plus the probe's cache and timeout (< 60 s at the defaults).")
    max_workers: int = Field(16, ge=1, description="Threads running sync handlers (reconciles in parallel).")
    addon_recheck_seconds: float = Field(
        120.0, gt=0, description="How long the answer 'does the cluster serve this add-on kind' (the Prometheus "
        "operator's ServiceMonitor/PodMonitor, KEDA's ScaledObject) is trusted: a CRD installed later is used "
        "within this.",
    )
    post_events: bool = Field(True, description="Write Kubernetes Events on condition transitions.")
    default_guardrails_policy: Path | None = Field(
        None, description="The default output policy (KAITO's guardrails.yaml) for RAGEngines with guardrails enabled "
        "and no configMapRef; the chart mounts its guardrails.defaultPolicy here. Unset: the engine package's.")
    # Fault injection for the crash-recovery test: exit hard after this many server-side applies.
    crash_after_applies: int | None = Field(None, ge=1)
    watch_timeout_seconds: int = Field(
        120, ge=1, description="Server-side watch timeout: idle watches are re-opened (kopf #698/#204)."
    )
    scan_cluster: bool = Field(
        True, description="Observe namespaces and CRDs cluster-wide (kopf's scanning). The chart turns it off when "
        "it grants Roles in the watched namespaces only (exact names, no globs): no cluster-scoped rights needed.",
    )
    # Policy: what a RAGEngine may ask for (reconcile/policy.py; docs/operator.md "What editing a RAGEngine grants").
    allowed_images: list[str] = Field(
        default_factory=list, description="Globs (JSON list) of the images spec.engine.image and "
        "spec.inference.image may name; empty: any. The operator's defaults are always allowed.",
    )
    allow_service_account_name: bool = Field(True, description="May spec.*.serviceAccountName be set.")
    allow_priority_class_name: bool = Field(True, description="May spec.*.priorityClassName be set.")
    allow_runtime_class_name: bool = Field(True, description="May spec.*.runtimeClassName be set.")
    allow_env_value_from: bool = Field(
        True, description="May spec.*.env[].valueFrom be set (it reads any Secret or ConfigMap key of the namespace).",
    )
    # Document sources (spec.sources, docs/sources.md): each sync runs outside the operator's process and
    # identity (syncer/runner.py), and pushes through the engine's API.
    sync_mode: Literal["job", "subprocess"] = Field(
        "job", description="job: each sync is a Job in the RAGEngine's namespace (no API token, its own limits, the "
        "namespace's NetworkPolicies). subprocess: a child process of the operator with rlimits and an empty "
        "environment, for an operator run outside the cluster against engines it reaches (engine_url).",
    )
    sync_image: str = Field(
        "ghcr.io/ragengine/ragengine-sync:0.1.0", min_length=1,
        description="Image of the sync Jobs: the sync worker with git and the document parsers (images/sync.Dockerfile), "
        "which the operator's own image does not carry.",
    )
    sync_cpu: str = Field("1", description="CPU limit of a sync Job's container.")
    sync_memory: str = Field(
        "1Gi", description="Memory limit of a sync Job's container; in subprocess mode the address-space limit.")
    sync_cpu_seconds: int = Field(600, ge=10, description="subprocess mode: CPU-time limit of one sync (RLIMIT_CPU).")
    sync_deadline_seconds: int = Field(
        1800, ge=30, description="Wall-clock limit of one sync: the Job's activeDeadlineSeconds, the subprocess's deadline.")
    sync_tmp_size: str = Field("2Gi", description="Size limit of a sync's /tmp (git objects), an emptyDir in job mode.")
    sync_node_selector: dict[str, str] = Field(
        default_factory=dict, description="nodeSelector of the sync Jobs' pods (JSON).")
    sync_tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="tolerations of the sync Jobs' pods (JSON list of core/v1 Tolerations).")
    engine_url: str | None = Field(
        None, description="Base URL of an engine, '{name}' and '{namespace}' filled in; default: its Service "
        "(http://<name>.<namespace>.svc.<cluster_domain>). Set it when syncs run where Service names do not resolve.",
    )
    receiver_port: int = Field(
        0, ge=0, le=65535, description="Port of the push receiver (POST /hook/<namespace>/<name>/<source>: signed "
        "GitHub, GitLab and generic webhooks start a source's sync; docs/sources.md); 0 = off.")
    receiver_max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024, description="Largest webhook body accepted.")
    receiver_rate_per_namespace: float = Field(
        5.0, gt=0, description="Webhook requests a second one namespace may send (a token bucket): a flood costs its "
        "own tenant only.")
    receiver_burst_per_namespace: int = Field(20, ge=1, description="Webhook requests one namespace may send at once.")
    source_workers: int = Field(4, ge=1, description="Source syncs running at once (Jobs or subprocesses).")
    source_workers_per_namespace: int = Field(
        2, ge=1, description="Source syncs of one namespace running at once, within source_workers: a tenant with "
        "many slow sources cannot take every worker.",
    )
    sources_cache_max_bytes: int = Field(
        1024**3, ge=0, description="Size budget of the git cache: after each sync the least recently used clones "
        "are removed until it fits (the chart's /tmp is 2Gi).",
    )
    # Egress rules of source fetches and of the inference URL probe (net/egress.py, docs/sources.md).
    sources_egress_allow: list[str] = Field(
        default_factory=list, description="CIDRs and host names (exact, or *.example.com) that source fetches and the "
        "LLM probe may reach although the egress rules refuse them by default (loopback, link-local, private, "
        "CGNAT, *.svc, *.cluster.local, localhost). JSON list in the environment.",
    )
    sources_cluster_cidrs: list[str] = Field(
        default_factory=list, description="The cluster's Service and Pod ranges: refused even inside an allowlisted "
        "CIDR (only an allowlisted host name opens them). JSON list in the environment.",
    )
    sources_fetch_timeout_seconds: float = Field(
        300.0, gt=0, description="Deadline of one fetch of one source (every URL or the whole git fetch and read).")
    sources_max_file_bytes: int = Field(
        20 * 1024 * 1024, ge=1, description="Largest file a source may hold, counted decoded; larger files are skipped.")
    sources_max_files: int = Field(
        20_000, ge=1, description="Ceiling of a source's spec.maxFiles (the spec's value is used up to it).")
    sources_max_bytes: int = Field(
        512 * 1024 * 1024, ge=1, description="Ceiling of a source's spec.maxSize in bytes (the spec's value is used up to it).")
