"""The engine's ingress NetworkPolicy (spec.engine.networkPolicy): networking/v1 peers, typed."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from .types import LabelMap, SpecModel


class LabelSelectorRequirement(SpecModel):
    """A metav1.LabelSelectorRequirement."""

    key: Annotated[str, Field(min_length=1, max_length=317)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[Annotated[str, Field(max_length=63)]] | None = Field(None, max_length=64)


class LabelSelector(SpecModel):
    """A metav1.LabelSelector; an empty one ({}) selects everything in its scope."""

    match_labels: LabelMap | None = None
    match_expressions: list[LabelSelectorRequirement] | None = Field(None, max_length=16)


def _cidr(value: str) -> str:
    ipaddress.ip_network(value, strict=False)  # ValueError names the fault
    return value


class IPBlock(SpecModel):
    """Addresses outside the cluster's pods (e.g. a load balancer's or an on-premise range)."""

    cidr: Annotated[str, Field(max_length=64, pattern=r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"), AfterValidator(_cidr)]
    except_: list[Annotated[str, Field(max_length=64), AfterValidator(_cidr)]] | None = Field(
        None, alias="except", max_length=32, description="Ranges inside cidr that are not admitted."
    )


class NetworkPolicyPeer(SpecModel):
    """Who may connect (networking/v1): podSelector, namespaceSelector, both (ANDed), or ipBlock alone."""

    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector | None = None
    ip_block: IPBlock | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> NetworkPolicyPeer:
        selectors = self.namespace_selector is not None or self.pod_selector is not None
        if selectors == (self.ip_block is not None):
            raise ValueError(NETWORK_PEER_RULE)
        return self


NETWORK_PEER_RULE = "a networkPolicy.allowFrom peer sets podSelector and/or namespaceSelector, or ipBlock alone"


class EngineNetworkPolicySpec(SpecModel):
    """A NetworkPolicy <name>-engine on the engine's pods: only allowFrom (by default the pods of the
    RAGEngine's namespace) and this RAGEngine's source-sync pods reach its port."""

    enabled: bool = Field(
        True, description="false: no NetworkPolicy, every pod the CNI lets through reaches the engine (the "
        "SecureDefaults condition turns False).",
    )
    allow_from: list[NetworkPolicyPeer] = Field(
        default_factory=lambda: [NetworkPolicyPeer(pod_selector=LabelSelector())], max_length=32,
        description="Peers admitted to the engine's port (any one suffices). Default: every pod of the "
        "RAGEngine's namespace ([{podSelector: {}}]). Empty: only this RAGEngine's source syncs. Every other "
        "ingress to the engine's pods is dropped (where the CNI enforces NetworkPolicies).",
        json_schema_extra={"default": [{"podSelector": {}}]},
    )
