"""The ``spec.sources[]`` models (part of the RAGEngine spec; the CRD schema is generated from them).

Credentials only ever come from a Secret in the RAGEngine's namespace (or, for S3, the sync pod's
workload identity): a git, HTTP or S3 endpoint URL with a user or password in it is refused, here and by
a CEL rule in the CRD. What the API server can check
cheaply is refused at admission (and mirrored here): a git ref that could pass for an option, a glob
with more than 16 ``*``, an index name the engine would refuse or could not route.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from ragengine.filetypes import FORMAT_NAMES

from .types import DNS_LABEL, SpecModel, Url

DURATION = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"  # Go durations, as Flux's interval: 30s, 5m, 1h30m
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/].*$")  # git@host:org/repo.git
# A branch, tag or commit id: never an option (no leading '-'), nothing git or a shell would read specially.
GIT_REF = r"^[A-Za-z0-9_][A-Za-z0-9_./+@-]*$"
# A glob with at most 16 '*' (each '**' counts two); matching is linear whatever the count (sources/git.py).
GLOB = r"^[^*]*(\*[^*]*){0,16}$"
# An index name the engine accepts (ragengine.index.disk.validate_name): printable, no '/'.
INDEX_NAME = r"^[^/\x00-\x1F\x7F]+$"
MAX_INDEX_NAME = 200
REF_MESSAGE = "git.ref must be a branch, tag or commit id: letters, digits and _ . / + @ -, not starting with '-'"
INDEX_MESSAGE = "index must be a name the engine accepts: printable, not blank, no '/', not '.' or '..'"
# S3 and GCS bucket names: lower-case letters, digits, '.', '-' ('_' for GCS), 3 to 222 characters.
BUCKET = r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$"
REGION = r"^[a-z0-9][a-z0-9-]{0,31}$"  # us-east-1, eu-central-1, auto (GCS, R2)
ACL_ENTRY = r"^(group|user):.+$"
SERVICE_ACCOUNT = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
OCR_LANGUAGES = r"^[A-Za-z_]{3,16}(\+[A-Za-z_]{3,16}){0,7}$"  # as POST /index/files takes them
SIZE = r"^([0-9]+)(Ki|Mi|Gi|k|M|G)?$"
_SIZE = re.compile(SIZE)
_SIZE_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
DEFAULT_MAX_FILES = 5000
KINDS = ("config_map", "git", "http", "s3")
DEFAULT_MAX_SIZE = "64Mi"


def duration_seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in _DURATION_PART.findall(value))


def size_bytes(value: str) -> int:
    """'64Mi' -> 67108864 (a count of bytes with an optional k/M/G or Ki/Mi/Gi suffix)."""
    found = _SIZE.match(value)
    if not found or not int(found.group(1)):
        raise ValueError(f"{value!r} is not a size such as 64Mi, 500M or 1048576")
    return int(found.group(1)) * _SIZE_UNITS[found.group(2)]


def _index_name(name: str | None) -> str | None:
    if name is None:
        return None
    if (not re.search(r"\S", name, re.ASCII) or name in (".", "..") or "/" in name or len(name) > MAX_INDEX_NAME
            or any(ord(ch) < 32 or ch == "\x7f" for ch in name)):
        raise ValueError(INDEX_MESSAGE)
    return name


def _no_userinfo(url: str) -> str:
    if _SCP_LIKE.match(url):
        return url  # ssh in scp form: the user is the ssh login (git@), the key comes from the Secret
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http", "ssh"):
        raise ValueError("url must be https://, http://, ssh:// or user@host:path")
    if parts.password is not None or (parts.username is not None and parts.scheme != "ssh"):
        raise ValueError("url must not contain credentials; put them in a Secret and name it in secretRef")
    return url


def _globs(paths: list[str], what: str) -> list[str]:
    for glob in paths:
        if not re.match(GLOB, glob):
            raise ValueError(f"{what}: at most 16 '*' per glob ({glob[:80]!r})")
    return paths


Glob = Annotated[str, Field(min_length=1, max_length=1024)]
AclEntry = Annotated[str, Field(pattern=ACL_ENTRY, max_length=512)]


class LocalSecretRef(SpecModel):
    """A Secret in the RAGEngine's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253)]


class ConfigMapSource(SpecModel):
    """Each key of a ConfigMap (or the listed ones) is one document."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    keys: list[Annotated[str, Field(min_length=1, max_length=253)]] | None = Field(
        None, max_length=1000, description="Only these keys; default: every key.")


class GitSource(SpecModel):
    """Files of a git repository at a branch, tag or commit. HTTPS credentials: a Secret with
    ``username`` and ``password`` (or ``token``); SSH: a Secret with ``identity`` and ``known_hosts``."""

    url: Url = Field(description="https://host/org/repo.git, ssh://git@host/org/repo.git or git@host:org/repo.git.")
    ref: Annotated[str, Field(min_length=1, max_length=255)] = Field(
        "main", description="Branch, tag or commit id (letters, digits and _ . / + @ -; not starting with '-').")
    paths: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=lambda: ["**"], max_length=100,
        description="Globs (gitignore syntax) of the files to index; at most 16 '*' per glob.",
        json_schema_extra={"default": ["**"]})
    secret_ref: LocalSecretRef | None = None

    _url = field_validator("url")(classmethod(lambda cls, v: _no_userinfo(v)))

    @field_validator("ref")
    @classmethod
    def _ref(cls, ref: str) -> str:
        if not re.match(GIT_REF, ref):
            raise ValueError(REF_MESSAGE)
        return ref

    _paths = field_validator("paths")(classmethod(lambda cls, v: _globs(v, "git.paths")))


class HttpSource(SpecModel):
    """Each URL is one document, fetched again on the interval with ETag / Last-Modified."""

    urls: list[Url] = Field(min_length=1, max_length=20, description="At most 20: for more documents use git.")
    secret_ref: LocalSecretRef | None = Field(None, description="A Secret whose 'token' is sent as a bearer token.")

    @field_validator("urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"{url}: http:// or https:// only")
            _no_userinfo(url)
        return urls


class S3Source(SpecModel):
    """Objects of an S3 (or S3-compatible: GCS's XML API, MinIO, Ceph, SeaweedFS) bucket under a prefix,
    synced by ETag: only new and changed objects are read. Credentials: a Secret with ``accessKeyId`` and
    ``secretAccessKey`` (and ``sessionToken`` for temporary ones); without ``secretRef`` the sync pod's
    workload identity (IRSA's web identity token, docs/sources.md), else unsigned (a public bucket)."""

    endpoint: Url | None = Field(
        None, description="https://s3.<region>.amazonaws.com (the default), https://storage.googleapis.com, "
        "https://minio.example:9000; no credentials, no path.")
    bucket: Annotated[str, Field(pattern=BUCKET, max_length=222)]
    prefix: Annotated[str, Field(max_length=1024)] = Field(
        "", description="Only keys under this prefix ('docs/'); rule and glob paths are relative to it.")
    region: Annotated[str, Field(pattern=REGION, max_length=32)] = Field(
        "us-east-1", description="The region requests are signed for (GCS: auto; MinIO: its MINIO_REGION).")
    paths: list[Glob] = Field(
        default_factory=lambda: ["**"], max_length=100,
        description="Globs (gitignore syntax) of the keys to index, relative to prefix; at most 16 '*' per glob.",
        json_schema_extra={"default": ["**"]})
    path_style: bool | None = Field(
        None, description="Address the bucket as <endpoint>/<bucket> (true) or <bucket>.<endpoint host> (false); "
        "default: path style when endpoint is set, virtual-hosted style on AWS.")
    secret_ref: LocalSecretRef | None = Field(
        None, description="A Secret with accessKeyId and secretAccessKey (and sessionToken); unset: the sync pod's "
        "web identity (IRSA), else unsigned requests.")
    service_account_name: Annotated[str, Field(pattern=SERVICE_ACCOUNT, max_length=253)] | None = Field(
        None, description="The sync Job runs as this ServiceAccount of the namespace (still without a Kubernetes "
        "token): with IRSA its eks.amazonaws.com/role-arn annotation gives the sync the role's credentials "
        "(AssumeRoleWithWebIdentity), no Secret needed. Not with secretRef; job mode only; subject to the operator's "
        "policy allowServiceAccountName.")

    _paths = field_validator("paths")(classmethod(lambda cls, v: _globs(v, "s3.paths")))

    @model_validator(mode="after")
    def _one_identity(self) -> S3Source:
        if self.secret_ref is not None and self.service_account_name is not None:
            raise ValueError("s3: set secretRef (keys in a Secret) or serviceAccountName (a workload identity), not both")
        return self

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("s3.endpoint must be an http:// or https:// URL")
        _no_userinfo(url)
        if parts.path.strip("/") or parts.query or parts.fragment:
            raise ValueError("s3.endpoint is http(s)://host[:port] only: no credentials (put them in a Secret), no path "
                             "(the folder goes in s3.prefix)")
        return url.rstrip("/")

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, prefix: str) -> str:
        if prefix.startswith("/") or any(ord(ch) < 32 for ch in prefix):
            raise ValueError("s3.prefix is a key prefix ('docs/'): no leading '/', no control characters")
        return prefix


class AclRule(SpecModel):
    """Documents whose path matches one of ``paths`` get ``acl`` (the first rule that matches wins)."""

    paths: list[Glob] = Field(min_length=1, max_length=100, description=(
        "Globs (gitignore syntax) of document paths, relative to the source's prefix or repository root "
        "(a ConfigMap key; an HTTP URL's path without the leading '/').")
    )
    acl: list[AclEntry] = Field(max_length=256, description="The document ACL of the matching documents; [] hides "
                                "them from every non-admin.")

    _paths = field_validator("paths")(classmethod(lambda cls, v: _globs(v, "aclRules[].paths")))


class SourceWebhook(SpecModel):
    """A push receiver for this source (the operator's receiver must be on: docs/sources.md)."""

    type: Literal["github", "gitlab", "generic"] = Field(description=(
        "github: X-Hub-Signature-256 (HMAC-SHA256 of the body); gitlab: its signing token (Standard Webhooks "
        "headers: webhook-id, webhook-timestamp, webhook-signature); generic: the same Standard Webhooks "
        "signature, for S3 event notifications and any other sender."))
    secret_ref: LocalSecretRef = Field(description="A Secret whose 'token' is the HMAC key (GitHub's secret, "
                                       "GitLab's signing token, a whsec_ key).")


class SourceChunking(SpecModel):
    """How the index splits documents (the engine's chunking: fixed per index, and an edit re-indexes it)."""

    chunk_size: int | None = Field(None, ge=16, le=8192, description="Tokens per chunk; default: the index's.")
    chunk_overlap: int | None = Field(None, ge=0, le=4096)
    contextual: bool | None = Field(
        None, description="Embed each chunk with its document's title and section path (docs/retrieval.md); "
        "default: the engine's RAGENGINE_CHUNK_CONTEXT.")


class Ingestion(SpecModel):
    """How the sync worker reads a source's files into documents (docs/sources.md)."""

    ocr_languages: Annotated[str, Field(pattern=OCR_LANGUAGES, max_length=140)] | None = Field(
        None, description="Tesseract languages for scanned PDF pages and images, joined by '+' (eng+deu); each needs "
        "Tesseract's data for it (Debian's tesseract-ocr-<lang>) where the sync runs. Default: eng.")
    formats: list[Literal[FORMAT_NAMES]] | None = Field(  # type: ignore[valid-type]
        None, min_length=1, max_length=len(FORMAT_NAMES),
        description="Only files of these formats are indexed; any other is skipped with the reason. Default: every "
        "format the engine reads.")

    def over(self, defaults: Ingestion | None) -> Ingestion:
        """These settings, with ``defaults`` (the index's) where they set nothing."""
        if defaults is None:
            return self
        return Ingestion(ocr_languages=self.ocr_languages or defaults.ocr_languages,
                         formats=self.formats or defaults.formats)


class IndexSettings(SpecModel):
    """What every source that fills one index shares: the index's chunking, and how its files are read
    (the fields a source's own ingestion sets win over these)."""

    name: Annotated[str, Field(min_length=1, max_length=MAX_INDEX_NAME)] = Field(description="The index (an engine index name).")
    chunking: SourceChunking | None = None
    ingestion: Ingestion | None = None

    _name = field_validator("name")(classmethod(lambda cls, v: _index_name(v)))


class Source(SpecModel):
    """One source of documents for one index. Exactly one of configMap, git, http, s3."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    index: Annotated[str, Field(min_length=1, max_length=MAX_INDEX_NAME)] | None = Field(
        None, description="The index this source fills (an engine index name: printable, no '/'); default: the source's name.")
    interval: Annotated[str, Field(pattern=DURATION, max_length=32)] | None = Field(
        None, description="Re-sync period (Go duration: 30s, 5m, 1h); unset = on changes of the spec only.")
    chunking: SourceChunking | None = Field(
        None, description="The chunking of this source's index (one per index: sources of one index must agree, "
        "or set it once in indexes[]).")
    ingestion: Ingestion | None = Field(None, description="How this source's files are read: OCR languages, formats.")
    metadata: dict[str, Annotated[str, Field(max_length=1024)]] | None = Field(
        None, description="Extra metadata on every document of this source.")
    acl: list[AclEntry] | None = Field(
        None, max_length=256, description="Document ACL of every document of this source: visible only to principals "
        "in these groups (group:<g>) or with these names (user:<key name>, user:<namespace>/<serviceaccount>); "
        "unset = everyone who may read the index (docs/access.md). Not with aclRules.")
    acl_rules: list[AclRule] | None = Field(
        None, min_length=1, max_length=100, description="Document ACLs by path: the first rule whose paths match a "
        "document gives its ACL; a document no rule matches is not indexed (fail closed) and is reported as "
        "skipped. Not with acl.")
    screen: bool = Field(
        False, description="Screen this source's chunks before they enter a prompt, in any index (metadata "
        "screen_retrieved: 'true' on its documents; docs/guardrails.md).")
    max_files: int = Field(DEFAULT_MAX_FILES, ge=1, le=100_000,
                           description="At most this many files (git, s3) are indexed; a revision with more fails the sync.")
    max_size: Annotated[str, Field(max_length=16)] = Field(
        DEFAULT_MAX_SIZE, description="At most this many bytes of files (64Mi, 500M); a revision holding more fails the sync.")
    config_map: ConfigMapSource | None = None
    git: GitSource | None = None
    http: HttpSource | None = None
    s3: S3Source | None = None
    webhook: SourceWebhook | None = Field(
        None, description="Syncs this source when a signed push (or S3 event notification) reaches the operator's "
        "receiver at /hook/<namespace>/<name>/<source>.")

    _index = field_validator("index")(classmethod(lambda cls, v: _index_name(v)))

    @field_validator("max_size")
    @classmethod
    def _size(cls, value: str) -> str:
        size_bytes(value)
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [k for k in KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a source needs exactly one of configMap, git, http, s3")
        if self.acl is not None and self.acl_rules is not None:
            raise ValueError("set acl (one ACL for every document) or aclRules (ACLs by path), not both")
        if self.interval is not None and duration_seconds(self.interval) < 10:
            raise ValueError("interval must be at least 10s")
        if self.metadata and "acl" in self.metadata:
            raise ValueError("metadata.acl would be a string (and hide every document): set the source's acl list")
        return self

    @property
    def kind(self) -> str:
        return "configMap" if self.config_map else "git" if self.git else "s3" if self.s3 else "http"

    @property
    def secret_ref(self) -> LocalSecretRef | None:
        """The Secret of the source's credentials (git, http, s3), if any."""
        holder = self.git or self.http or self.s3
        return holder.secret_ref if holder is not None else None

    @property
    def index_name(self) -> str:
        return self.index or self.name

    @property
    def max_bytes(self) -> int:
        return size_bytes(self.max_size)


def unique_names(sources: list[Source]) -> list[Source]:
    seen: set[str] = set()
    for s in sources:
        if s.name in seen:
            raise ValueError(f"two sources are named '{s.name}'; source names must be unique")
        seen.add(s.name)
    return sources


def unique_indexes(indexes: list[IndexSettings]) -> list[IndexSettings]:
    seen: set[str] = set()
    for i in indexes:
        if i.name in seen:
            raise ValueError(f"indexes[] names '{i.name}' twice")
        seen.add(i.name)
    return indexes


def effective_sources(sources: list[Source], indexes: list[IndexSettings]) -> list[Source]:
    """Each source with its index's settings where it sets none: the index's chunking, and its ingestion
    fields under the source's own. Raises ValueError when two sources of one index (or a source and its
    index's entry) ask for different chunking: an index has one."""
    by_name = {i.name: i for i in indexes}
    out: list[Source] = []
    chunking: dict[str, tuple[str, SourceChunking]] = {i.name: ("indexes[]", i.chunking) for i in indexes if i.chunking}
    for s in sources:
        index = by_name.get(s.index_name)
        if s.chunking is not None:
            held = chunking.setdefault(s.index_name, (f"source '{s.name}'", s.chunking))
            if held[1] != s.chunking:
                raise ValueError(f"source '{s.name}' and {held[0]} set different chunking for index "
                                 f"'{s.index_name}': an index has one chunking (set it once in indexes[])")
        if index is None:
            out.append(s)
            continue
        ingestion = s.ingestion.over(index.ingestion) if s.ingestion else index.ingestion
        out.append(s.model_copy(update={"chunking": s.chunking or index.chunking, "ingestion": ingestion}))
    return out

