"""Who may do what: the access file's model, roles and principals. Pure (pydantic only).

The access file (``RAGENGINE_ACCESS_FILE``, YAML) lists principals and what each may reach::

    keys:
      - {name: app-a, key: "<secret>", indexes: ["team-a-*"], role: read, groups: [ops]}
      - {name: loader, keySha256: "<hex>", indexes: ["*"], role: write, limits: {requestsPerMinute: 600}}
    serviceAccounts:
      - {namespace: shop, name: frontend, indexes: ["catalog"], role: read, groups: [public]}
    audience: ragengine-prod          # what ServiceAccount tokens must be issued for (required with serviceAccounts)
    defaultLimits: {requestsPerMinute: 120, tokensPerMinute: 20000}

Roles are ordered: ``read`` (retrieve, chat, list, its own sessions and files) < ``write`` (adds index
writes) < ``admin`` (everything, deleting indexes and anyone's sessions included). ``indexes`` are globs
(``fnmatch``: ``*``, ``?``, ``[ab]``) over index names; a principal sees only the indexes they match.
``RAGENGINE_API_KEY`` is one more key: ``admin`` on every index, as before access files existed.

A ServiceAccount principal is named ``<namespace>/<name>`` (key names cannot hold ``/``, so the two kinds
never collide); document ACLs name principals as ``user:<key name>`` or ``user:<namespace>/<name>`` and
groups as ``group:<group>`` (``Principal.acl_tokens``). ``limits`` (per principal, else ``defaultLimits``)
cap requests and LLM tokens per minute (``access.limits``).
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import re
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a namespace
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a ServiceAccount name
_GROUP = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,126}$"


class Role(enum.IntEnum):
    read = 1
    write = 2
    admin = 3


def key_digest(key: str) -> bytes:
    """SHA-256 of a key: what is kept in memory and compared, so a comparison's time does not depend on
    the key's length or content."""
    return hashlib.sha256(key.encode()).digest()


class Limits(BaseModel):
    """Per principal and minute; unset = no limit of that kind."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    requests_per_minute: int | None = Field(None, alias="requestsPerMinute", ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(None, alias="tokensPerMinute", ge=1, le=1_000_000_000)


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    indexes: list[str] = Field(..., min_length=1, description="Globs over index names this principal may reach.")
    role: Role
    groups: list[Annotated[str, Field(pattern=_GROUP)]] = Field(
        default_factory=list, description="Groups for document ACLs (acl: ['group:<g>']).")
    limits: Limits | None = Field(None, description="Requests and LLM tokens per minute; default: defaultLimits.")

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return Role[value]
            except KeyError:
                raise ValueError(f"unknown role {value!r}: use read, write or admin") from None
        return value

    @field_validator("indexes")
    @classmethod
    def _globs(cls, value: list[str]) -> list[str]:
        for glob in value:
            if not glob or len(glob) > 256:
                raise ValueError(f"index pattern {glob!r} must be 1-256 characters")
        return value


class KeyRule(_Rule):
    name: str = Field(..., pattern=_NAME)
    key: str | None = Field(None, min_length=16, description="The key itself (from a Secret).")
    key_sha256: str | None = Field(None, alias="keySha256", description="Hex SHA-256 of the key instead of the key.")

    @model_validator(mode="after")
    def _one_key(self) -> KeyRule:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"key {self.name!r}: give exactly one of 'key' and 'keySha256'")
        if self.key_sha256 is not None and not _HEX64.match(self.key_sha256.lower()):
            raise ValueError(f"key {self.name!r}: keySha256 must be 64 hex digits")
        return self

    def digest(self) -> bytes:
        return key_digest(self.key) if self.key is not None else bytes.fromhex(self.key_sha256 or "")


class ServiceAccountRule(_Rule):
    """A Kubernetes ServiceAccount whose projected token (audience ``AccessRules.audience``) authenticates."""

    namespace: str = Field(..., pattern=_DNS_LABEL)
    name: str = Field(..., pattern=_DNS_SUBDOMAIN, max_length=253)

    @property
    def principal_name(self) -> str:
        return f"{self.namespace}/{self.name}"


class AccessRules(BaseModel):
    """The access file, parsed. Unknown keys are errors: a typo must never silently open or close access."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    keys: list[KeyRule] = Field(default_factory=list)
    service_accounts: list[ServiceAccountRule] = Field(default_factory=list, alias="serviceAccounts")
    audience: str | None = Field(
        None, min_length=1, max_length=253,
        description="The audience ServiceAccount tokens must carry (kubectl create token --audience / a projected "
        "token's audience); required with serviceAccounts.")
    default_limits: Limits | None = Field(None, alias="defaultLimits")

    @model_validator(mode="after")
    def _unique(self) -> AccessRules:
        names = [k.name for k in self.keys]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"principal names must be unique; repeated: {', '.join(dupes)}")
        digests = [k.digest() for k in self.keys]
        if len(set(digests)) != len(digests):
            raise ValueError("two keys have the same key material")
        accounts = [a.principal_name for a in self.service_accounts]
        dupes = sorted({n for n in accounts if accounts.count(n) > 1})
        if dupes:
            raise ValueError(f"serviceAccounts must be unique; repeated: {', '.join(dupes)}")
        if self.service_accounts and self.audience is None:
            raise ValueError("serviceAccounts need 'audience': the audience their tokens are issued for "
                             "(a token for another audience, e.g. the API server's, must not work here)")
        return self


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``name`` is unique per kind and bounded by the configuration (it labels
    metrics and owns sessions)."""

    name: str
    kind: str  # "key", "serviceaccount", "anonymous" (access control off)
    role: Role
    indexes: tuple[str, ...] = ("*",)
    groups: frozenset[str] = field(default_factory=frozenset)
    limits: Limits | None = None

    @property
    def id(self) -> str:
        """What owns a session or an upload: stable across key rotation, distinct across kinds."""
        return f"{self.kind}:{self.name}"

    def sees(self, index: str) -> bool:
        return any(fnmatch.fnmatchcase(index, glob) for glob in self.indexes)

    @property
    def acl_tokens(self) -> tuple[str, ...]:
        """The document-ACL entries this principal matches: ``user:<name>`` and ``group:<g>`` per group."""
        return tuple(sorted({f"user:{self.name}", *(f"group:{g}" for g in self.groups)}))


ANONYMOUS = Principal(name="anonymous", kind="anonymous", role=Role.admin)
