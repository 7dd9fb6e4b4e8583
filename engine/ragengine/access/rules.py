"""Who may do what: the access file's model, roles and principals. Pure (pydantic only).

The access file (``RAGENGINE_ACCESS_FILE``, YAML) lists principals and what each may reach::

    keys:
      - {name: app-a, key: "<secret>", indexes: ["team-a-*"], role: read, groups: [ops]}
      - {name: loader, keySha256: "<hex>", indexes: ["*"], role: write}

Roles are ordered: ``read`` (retrieve, chat, list, its own sessions and files) < ``write`` (adds index
writes) < ``admin`` (everything, deleting indexes and anyone's sessions included). ``indexes`` are globs
(``fnmatch``: ``*``, ``?``, ``[ab]``) over index names; a principal sees only the indexes they match.
``RAGENGINE_API_KEY`` is one more key: ``admin`` on every index, as before access files existed.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import re
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}$"


class Role(enum.IntEnum):
    read = 1
    write = 2
    admin = 3


def key_digest(key: str) -> bytes:
    """SHA-256 of a key: what is kept in memory and compared, so a comparison's time does not depend on
    the key's length or content."""
    return hashlib.sha256(key.encode()).digest()


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    indexes: list[str] = Field(..., min_length=1, description="Globs over index names this principal may reach.")
    role: Role
    groups: list[str] = Field(default_factory=list, description="Groups for document ACLs (acl: ['group:<g>']).")

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


class AccessRules(BaseModel):
    """The access file, parsed. Unknown keys are errors: a typo must never silently open or close access."""

    model_config = ConfigDict(extra="forbid")

    keys: list[KeyRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> AccessRules:
        names = [k.name for k in self.keys]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"principal names must be unique; repeated: {', '.join(dupes)}")
        digests = [k.digest() for k in self.keys]
        if len(set(digests)) != len(digests):
            raise ValueError("two keys have the same key material")
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

    @property
    def id(self) -> str:
        """What owns a session or an upload: stable across key rotation, distinct across kinds."""
        return f"{self.kind}:{self.name}"

    def sees(self, index: str) -> bool:
        return any(fnmatch.fnmatchcase(index, glob) for glob in self.indexes)


ANONYMOUS = Principal(name="anonymous", kind="anonymous", role=Role.admin)
