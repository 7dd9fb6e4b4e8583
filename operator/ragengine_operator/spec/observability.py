"""spec.observability: Prometheus scraping (metrics) and OpenTelemetry traces (tracing)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .network import NetworkPolicyPeer
from .types import LabelMap, SpecModel

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
