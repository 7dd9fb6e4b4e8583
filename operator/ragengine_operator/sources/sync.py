"""One source, one sync: read the revision, plan against what the index holds, push, report.

``sync_source`` is the unit the operator runs per source (in its own task, so a slow or failing
source never holds up the RAGEngine's reconcile or the other sources). It never raises for a source
problem: the result carries ``ok=False`` and a message for ``status.sources[]`` and an Event, and the
documents already indexed stay as they are. A sync interrupted half-way (the operator or the engine
restarted) converges on the next run: the plan compares content hashes, so what was written is
skipped and what was not is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragengine_operator.sources.engine import EngineClient, EngineUnavailable
from ragengine_operator.sources.fetch import Fetched, FetchError, GitCredentials, fetch_git, fetch_http
from ragengine_operator.sources.plan import plan_sync
from ragengine_operator.sources.spec import Source


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
          previous_validators: dict[str, dict] | None, read_configmap: Callable[[], Fetched] | None = None) -> Fetched:
    if source.git is not None:
        creds = None
        if secret:
            creds = GitCredentials(username=secret.get("username"), password=secret.get("password") or secret.get("token"),
                                   identity=secret.get("identity"), known_hosts=secret.get("known_hosts"))
        return fetch_git(source.git.url, source.git.ref, source.git.paths, cache / source.name, creds, previous_revision)
    if source.http is not None:
        return fetch_http(source.http.urls, previous_validators or {}, (secret or {}).get("token"),
                          last_revision=previous_revision)
    assert read_configmap is not None, "a configMap source needs the caller's ConfigMap reader"
    return read_configmap()


def sync_source(source: Source, engine: EngineClient, read: Callable[[], Fetched],
                previous_revision: str | None = None, progress: Callable[[str], None] | None = None) -> SyncResult:
    """``progress`` receives a line after each batch written (``syncing <rev>: 64 of 1000 documents written``)."""
    result = SyncResult(source.name, source.kind, ok=False)
    try:
        fetched = read()
    except FetchError as exc:
        result.message = str(exc)
        return result
    result.revision, result.validators = fetched.revision, fetched.validators
    if fetched.unchanged and previous_revision == fetched.revision:
        result.ok, result.message = True, "up to date"
        return result
    result.skipped = len(fetched.skipped)
    result.skipped_examples = dict(list(fetched.skipped.items())[:5])
    chunking = source.chunking.model_dump(exclude_none=True) if source.chunking else None
    try:
        indexed = engine.indexed(source.index_name, source.name)
        extra = {**(source.metadata or {}), **({"acl": list(source.acl)} if source.acl is not None else {})}
        plan = plan_sync(source.name, fetched.revision, fetched.files, indexed, extra, fetched.kept)
        total = len(plan.add) + len(plan.update) + len(plan.delete)
        applied = engine.apply(source.index_name, plan, chunking, progress and (
            lambda done: progress(f"syncing {fetched.revision[:12]}: {done.added + done.updated + done.deleted} "
                                  f"of {total} documents written")))
        result.chunks = engine.chunks(source.index_name)
    except EngineUnavailable as exc:
        result.message = f"not synced: {exc}"
        return result
    result.ok = True
    result.documents = len(fetched.files) + len(fetched.kept)
    result.written = applied.added + applied.updated + applied.deleted
    result.message = (f"{applied.added} added, {applied.updated} updated, {applied.deleted} deleted, "
                      f"{plan.unchanged} unchanged, {result.skipped} skipped")
    if result.skipped_examples:
        result.message += " (" + "; ".join(f"{p}: {why}" for p, why in result.skipped_examples.items()) + ")"
    return result
