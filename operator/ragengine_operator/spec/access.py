"""Who may call the engine (spec.access): keys from Secrets, Kubernetes ServiceAccounts, roles, index patterns,
groups for document ACLs, rate limits. The same rules as the engine's access file (docs/access.md), which
the operator renders from this (manifests/access.py) into a Secret it owns; keys are referenced, never
written in the spec, and reach that Secret only as their SHA-256.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from .types import DNS_LABEL, Name, SpecModel

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}$"  # as the engine's key names (access/rules.py)
_SA_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_GROUP = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,126}$"
# The Kubernetes API server's own audience in every cluster (its in-cluster URL, which the default issuer and
# --api-audiences are, under any cluster domain); the cluster's actual ones are checked by the controller
# (kube/client.py api_audiences) and by the engine at start (its own token's). Same pattern in the CRD's CEL.
API_AUDIENCE = re.compile(r"(?i)^(https?://)?kubernetes[.]default([.]svc([.][a-z0-9.-]+)?)?[.]?(:443)?/?$")
API_AUDIENCE_MESSAGE = ("access.audience must not be the Kubernetes API server's own audience (such as "
                        "https://kubernetes.default.svc): callers would hand the engine tokens that open the API")


def _not_the_api_servers(audience: str) -> str:
    if API_AUDIENCE.match(audience.strip()):
        raise ValueError(API_AUDIENCE_MESSAGE)
    return audience


IndexPattern = Annotated[str, Field(min_length=1, max_length=256)]
Group = Annotated[str, Field(pattern=_GROUP, max_length=127)]


class KeySecretRef(SpecModel):
    """A key of a Secret in the RAGEngine's namespace."""

    name: Name = Field(description="Secret name.")
    key: Annotated[str, Field(min_length=1, max_length=253)] = Field("key", description="Key in the Secret.")


class AccessLimits(SpecModel):
    """Per principal and minute; unset = no limit of that kind (docs/access.md, "Rate limits")."""

    requests_per_minute: int | None = Field(None, ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(None, ge=1, le=1_000_000_000, description="LLM tokens (prompt + answer).")


class _AccessRule(SpecModel):
    indexes: list[IndexPattern] = Field(min_length=1, max_length=64, description="Globs over index names (*, ?, [ab]).")
    role: Literal["read", "write", "admin"] = Field(
        description="read: retrieve, chat, own sessions; write: + index writes; admin: everything.")
    groups: list[Group] = Field(default_factory=list, max_length=64,
                                description="Groups for document ACLs (a document's acl: ['group:<g>']).")
    limits: AccessLimits | None = Field(None, description="Default: defaultLimits.")


class AccessKey(_AccessRule):
    """An API key, read by the operator from a Secret in the RAGEngine's namespace."""

    name: Annotated[str, Field(pattern=_NAME, max_length=63)] = Field(
        description="Unique; what logs, metrics and document ACLs (user:<name>) call this principal.")
    key_secret_ref: KeySecretRef = Field(description="The Secret key holding the key itself (at least 16 characters).")


class AccessServiceAccount(_AccessRule):
    """A Kubernetes ServiceAccount whose token (issued for the audience) authenticates; any namespace."""

    namespace: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    name: Annotated[str, Field(pattern=_SA_NAME, max_length=253)]


class AccessSpec(SpecModel):
    """The engine's principals. Setting it replaces 'one admin key' with these rules (auth.apiKeySecretRef, when
    set, stays an admin key). A change reaches the engines within seconds, without a restart."""

    keys: list[AccessKey] = Field(default_factory=list, max_length=256)
    service_accounts: list[AccessServiceAccount] = Field(
        default_factory=list, max_length=256,
        description="Apps authenticating with their ServiceAccount token: the engine then runs as <name>-engine, a "
        "ServiceAccount the operator makes and allows to create TokenReviews (system:auth-delegator); "
        "engine.serviceAccountName cannot be set with them.")
    audience: Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_not_the_api_servers)] | None = Field(
        None, description="The audience tokens must be issued for; default ragengine.io/<namespace>/<name>. Never the "
        "API server's own (https://kubernetes.default.svc, the cluster's issuer).")
    default_limits: AccessLimits | None = None

    @model_validator(mode="after")
    def _unique(self) -> AccessSpec:
        names = [k.name for k in self.keys]
        accounts = [f"{a.namespace}/{a.name}" for a in self.service_accounts]
        if "api-key" in names:  # the engine's name for RAGENGINE_API_KEY (the admin key the operator sets)
            raise ValueError("access.keys: the name 'api-key' is reserved for the engine's admin key")
        for what, items in (("access.keys names", names), ("access.serviceAccounts", accounts)):
            dupes = sorted({n for n in items if items.count(n) > 1})
            if dupes:
                raise ValueError(f"{what} must be unique; repeated: {', '.join(dupes)}")
        return self
