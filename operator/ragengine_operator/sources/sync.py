"""One source, one sync: read the revision, plan against what the index holds, push, report.

``sync_source`` is the unit the operator runs per source (in its own task, so a slow or failing
source never holds up the RAGEngine's reconcile or the other sources). It never raises: any failure,
expected (``FetchError``, ``EngineUnavailable``) or not, becomes a result with ``ok=False`` and a
message for ``status.sources[]`` and an Event (so the source backs off), and the documents already
indexed stay as they are. A sync interrupted half-way (the operator or the engine restarted)
converges on the next run: the plan compares content hashes, so what was written is skipped and what
was not is written.

``fetch`` reads one source under a ``FetchPolicy`` (the operator's egress rules and limits, see
``FetchPolicy.from_settings``), wherever the sync runs.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ragengine_operator.net.egress import EgressPolicy
from ragengine_operator.sources import cache as clones
from ragengine_operator.sources.acl import NO_RULE, SourceMetadata
from ragengine_operator.sources.engine import EngineClient, EngineUnavailable
from ragengine_operator.sources.fetch import Fetched, FetchError, FetchLimits, GitCredentials, fetch_git, fetch_http
from ragengine_operator.sources.fetched import Deadline
from ragengine_operator.sources.plan import plan_sync
from ragengine_operator.sources.s3 import S3Credentials, fetch_s3
from ragengine_operator.sources.s3_identity import web_identity
from ragengine_operator.spec.sources import Source

log = logging.getLogger(__name__)
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"


@dataclass(frozen=True)
class FetchPolicy:
    """The operator-wide rules a fetch runs under: egress, limits (whose ``max_files`` / ``max_bytes`` are
    the ceilings of each source's ``maxFiles`` / ``maxSize``) and the git cache's size budget."""

    egress: EgressPolicy = field(default_factory=EgressPolicy)
    limits: FetchLimits = field(default_factory=lambda: FetchLimits(max_files=20_000, max_bytes=512 * 1024 * 1024))
    cache_max_bytes: int | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> FetchPolicy:
        """From ``OperatorSettings`` (or anything with the same ``sources_*`` fields)."""
        return cls(EgressPolicy.from_settings(settings),
                   FetchLimits(max_file_bytes=settings.sources_max_file_bytes, max_files=settings.sources_max_files,
                               max_bytes=settings.sources_max_bytes, deadline_s=settings.sources_fetch_timeout_seconds),
                   settings.sources_cache_max_bytes)

    @classmethod
    def from_request(cls, values: Mapping[str, Any] | None) -> FetchPolicy:
        """From a sync request's ``fetch_policy`` (``policy_settings``'s output): the worker's rules."""
        return cls.from_settings(SimpleNamespace(**values)) if values else cls()

    def limits_for(self, source: Source) -> FetchLimits:
        """The operator's limits, narrowed by the source's own, with how the source reads its files."""
        ingestion = source.ingestion
        return replace(self.limits, max_files=min(source.max_files, self.limits.max_files),
                       max_bytes=min(source.max_bytes, self.limits.max_bytes),
                       ocr_languages=ingestion.ocr_languages if ingestion else None,
                       formats=frozenset(ingestion.formats) if ingestion and ingestion.formats else None)


POLICY_SETTINGS = ("sources_egress_allow", "sources_cluster_cidrs", "cluster_domain", "sources_max_file_bytes",
                   "sources_max_files", "sources_max_bytes", "sources_fetch_timeout_seconds", "sources_cache_max_bytes")


def policy_settings(settings: Any) -> dict[str, Any]:
    """The operator settings a fetch runs under, for a sync request (JSON): the worker has no settings of its own."""
    return {name: getattr(settings, name) for name in POLICY_SETTINGS}


def source_secret(obj: Mapping[str, Any], namespace: str) -> dict[str, str]:
    """A Secret's data as a source's credentials; a ServiceAccount token is refused (naming one would
    send the account's token to whatever URL the source names)."""
    name = (obj.get("metadata") or {}).get("name", "")
    if obj.get("type") == SERVICE_ACCOUNT_TOKEN:
        raise FetchError(f"Secret {name} in namespace {namespace} is a ServiceAccount token "
                         f"({SERVICE_ACCOUNT_TOKEN}): it is never sent as a source's credentials")
    return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}


def unexpected(exc: BaseException) -> str:
    return f"unexpected error: {type(exc).__name__}: {exc}"[:1024]


@dataclass
class SyncResult:
    name: str
    type: str
    ok: bool
    revision: str | None = None
    documents: int = 0
    skipped: int = 0
    chunks: int | None = None
    written: int = 0  # documents added, updated or deleted by this sync
    message: str = ""
    skipped_examples: dict[str, str] = field(default_factory=dict)
    validators: dict[str, dict] = field(default_factory=dict)


def fetch(source: Source, *, cache: Path, secret: dict[str, str] | None, previous_revision: str | None,
          previous_validators: dict[str, dict] | None, read_configmap: Callable[[], Fetched] | None = None,
          policy: FetchPolicy | None = None, held: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None,
          golden_set_path: str | None = None) -> Fetched:
    """``cache``: this RAGEngine's folder of the git cache (``<root>/<namespace>/<name>``); ``held``: the metadata
    of the source's documents in its index (an S3 object at its document's ETag is not read again).
    ``golden_set_path``: a file read as it is (``Fetched.raw``), not indexed: spec.evaluation's golden set."""
    policy = policy or FetchPolicy()
    raw = frozenset({golden_set_path}) if golden_set_path else frozenset()
    limits = policy.limits_for(source)
    if source.s3 is not None:
        keys = S3Credentials.from_secret(secret) or web_identity(os.environ, source.s3.region, policy.egress,
                                                                 Deadline(min(60.0, limits.deadline_s)))
        return fetch_s3(source.s3, keys, held=held, known_revision=previous_revision, policy=policy.egress,
                        limits=limits, raw_paths=raw)
    if source.git is not None:
        creds = None
        if secret:
            creds = GitCredentials(username=secret.get("username"), password=secret.get("password") or secret.get("token"),
                                   identity=secret.get("identity"), known_hosts=secret.get("known_hosts"))
        with clones.using(clones.clone_dir(cache, source.name, source.git.url)) as clone:
            fetched = fetch_git(source.git.url, source.git.ref, source.git.paths, clone, creds, previous_revision,
                                policy=policy.egress, limits=limits, raw_paths=raw)
        if policy.cache_max_bytes is not None:
            clones.enforce_budget(clones.root_of(cache), policy.cache_max_bytes)
        return fetched
    if source.http is not None:
        return fetch_http(source.http.urls, previous_validators or {}, (secret or {}).get("token"),
                          policy=policy.egress, limits=limits, last_revision=previous_revision, raw_paths=raw)
    assert read_configmap is not None, "a configMap source needs the caller's ConfigMap reader"
    return read_configmap()


def sync_source(source: Source, engine: EngineClient, read: Callable[[], Fetched],
                previous_revision: str | None = None, progress: Callable[[str], None] | None = None,
                golden_set_path: str | None = None) -> SyncResult:
    """``progress`` receives a line after each batch written (``syncing <rev>: 64 of 1000 documents written``).
    ``golden_set_path``: that file of the revision goes to the engine as the index's golden set, not as a
    document (docs/evaluation.md)."""
    result = SyncResult(source.name, source.kind, ok=False)
    try:
        fetched = read()
    except FetchError as exc:
        result.message = str(exc)
        return result
    except EngineUnavailable as exc:  # an S3 reader asks the index which ETags it holds
        result.message = f"not synced: {exc}"
        return result
    except Exception as exc:  # a reader's surprise: reported and backed off like any failure
        log.exception("reading source %s failed unexpectedly", source.name)
        result.message = unexpected(exc)
        return result
    result.revision, result.validators = fetched.revision, fetched.validators
    chunking = source.chunking.model_dump(exclude_none=True) if source.chunking else None
    reindexing = None
    if chunking:  # an edited chunking re-indexes the index in the engine (the old version serves meanwhile)
        try:
            reindexing = engine.follow_chunking(source.index_name, chunking)
        except EngineUnavailable as exc:
            result.message = f"not synced: {exc}"
            return result
    note = f"; re-indexing to the new chunking (version {reindexing})" if reindexing else ""
    if fetched.unchanged and previous_revision == fetched.revision:
        result.ok, result.message = True, "up to date" + note
        return result
    own = SourceMetadata(source)
    for path in [f.path for f in fetched.files] + fetched.kept:  # aclRules: a file no rule matches is refused
        if own(path) is None:
            fetched.skipped[path] = NO_RULE
    result.skipped = len(fetched.skipped)
    result.skipped_examples = dict(list(fetched.skipped.items())[:5])
    try:
        indexed = engine.documents_of(source.index_name, source.name)
        plan = plan_sync(source.name, fetched.revision, fetched.files, indexed, own, fetched.kept)
        total = len(plan.add) + len(plan.update) + len(plan.delete) + len(plan.relabel)
        applied = engine.apply(source.index_name, plan, chunking, progress and (
            lambda done: progress(f"syncing {fetched.revision[:12]}: {done.written} of {total} documents written")))
        result.chunks = engine.chunks(source.index_name)
    except EngineUnavailable as exc:
        result.message = f"not synced: {exc}"
        return result
    except Exception as exc:
        log.exception("writing source %s failed unexpectedly", source.name)
        result.message = f"not synced: {unexpected(exc)}"
        return result
    golden_note = ""
    if golden_set_path and not fetched.unchanged:
        try:
            golden_note = hand_golden_set(engine, source, fetched, golden_set_path)
        except EngineUnavailable as exc:
            result.message = f"not synced: {exc}"
            return result
    result.ok = True
    result.documents = len(plan.add) + len(plan.update) + len(plan.relabel) + plan.unchanged
    result.written = applied.written
    result.message = (f"{applied.added} added, {applied.updated} updated, {applied.deleted} deleted, "
                      + (f"{applied.relabelled} relabelled, " if applied.relabelled else "")
                      + f"{plan.unchanged} unchanged, {result.skipped} skipped")
    if result.skipped_examples:
        result.message += " (" + "; ".join(f"{p}: {why}" for p, why in result.skipped_examples.items()) + ")"
    result.message += note + golden_note
    return result


def hand_golden_set(engine: EngineClient, source: Source, fetched: Fetched, path: str) -> str:
    """The golden set file of this revision to the engine; a note for the sync's message."""
    data = fetched.raw.get(path)
    if data is None:
        kept = path in fetched.kept  # HTTP 304: the engine has this version already
        return "" if kept else f"; golden set {path}: not in this revision (check the source's paths)"
    try:
        handed = engine.put_golden_set(source.index_name, source.name, path, fetched.revision, data.decode("utf-8"))
    except UnicodeDecodeError:
        return f"; golden set {path}: not UTF-8"
    if isinstance(handed, str):
        return f"; golden set {path} refused by the engine: {handed}"
    return f"; golden set {path}: {handed} questions handed to the engine"
