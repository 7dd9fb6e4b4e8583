"""The core/v1 shapes the components' specs share: quantities and sizes, Secret keys, resources, tolerations,
pod options (affinity, labels, env, ...), volumes and an HPA's bounds."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from .types import LabelMap, Name, SpecModel

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


def is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


class SecretKeyRef(SpecModel):
    """A key of a Secret in the RAGEngine's namespace."""

    name: Name = Field(description="Secret name.")
    key: Annotated[str, Field(min_length=1, max_length=253)] = Field("api-key", description="Key in the Secret.")


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
