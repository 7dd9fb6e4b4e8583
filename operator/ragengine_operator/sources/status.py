"""Source sync bookkeeping: when each source is due, its ``status.sources[]`` entry, the
``SourcesSynced`` condition and the Events. Pure: the clock (epoch seconds) is an argument.

Contract:

- ``due(source, state, now, requested)``: a source never synced, whose spec changed since its last sync,
  or with a sync request not handled yet (``sync_requests``: the ``ragengine.io/sync-now`` annotation, a
  push's ``sync.ragengine.io/<source>``) is due at once, backoff or not; one whose last sync failed is
  retried with exponential backoff (5 s, 10 s, ... 5 min); one in sync is checked again every
  ``interval`` (default by kind: a ConfigMap every 30 s, a GET of one object; git, HTTP and S3 every 5 min).
  A check that finds the same revision writes nothing.
- ``SourceState`` is what the operator remembers of a source; ``to_status`` renders it as the
  ``status.sources[]`` entry and ``from_status`` reads it back after an operator restart, so a restart
  neither loses a revision nor re-syncs what is already synced.
- ``sources_condition``: ``SourcesSynced`` is True only when every source's last sync of its current
  spec succeeded; its message names each source that is not, with the reason. A failing source never
  touches ``Ready``: the engine serves what it has.
- ``sync_event``: one Event per sync that wrote something or moved the revision, and one per distinct
  failure; a check that found nothing new is not news.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ragengine_operator.constants import SOURCE_SYNC_ANNOTATION_PREFIX, SYNC_NOW_ANNOTATION
from ragengine_operator.spec.sources import Source, duration_seconds

SOURCES_SYNCED = "SourcesSynced"
DEFAULT_PERIOD_S = {"configMap": 30.0, "git": 300.0, "http": 300.0, "s3": 300.0}
RETRY_BASE_S = 5.0
RETRY_MAX_S = 300.0
WAITING_FOR_ENGINE = "waiting for the engine to be ready"
SYNCING = "syncing "  # the message of a sync under way: "syncing <revision>: n of m documents written"


def spec_digest(source: Source) -> str:
    blob = json.dumps(source.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def period(source: Source) -> float:
    return duration_seconds(source.interval) if source.interval else DEFAULT_PERIOD_S[source.kind]


def retry_delay(failures: int) -> float:
    return 0.0 if failures <= 0 else min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (failures - 1))


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class SourceState:
    """What the operator knows of one source's last sync."""

    digest: str | None
    synced: bool = False
    revision: str | None = None
    documents: int | None = None
    chunks: int | None = None
    skipped: int | None = None
    last_sync: float | None = None  # the last successful sync
    last_attempt: float | None = None  # the last sync or check, whatever its outcome
    message: str = ""
    failures: int = 0  # consecutive failed syncs (memory only: a restart retries at once)
    validators: dict[str, dict] = field(default_factory=dict)  # http: url -> ETag / Last-Modified (memory only)
    handled_request: str | None = None  # the last sync request this source's sync started after

    @classmethod
    def from_status(cls, entry: dict[str, Any]) -> SourceState:
        return cls(digest=entry.get("specDigest"), synced=bool(entry.get("synced")), revision=entry.get("revision"),
                   documents=entry.get("documents"), chunks=entry.get("chunks"), skipped=entry.get("skipped"),
                   last_sync=epoch(entry.get("lastSyncTime")), last_attempt=epoch(entry.get("lastAttemptTime")),
                   message=entry.get("message", ""), handled_request=entry.get("lastHandledSyncRequest"))

    def to_status(self, source: Source) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": source.name, "type": source.kind, "index": source.index_name,
                                 "synced": self.synced, "message": self.message[:2048]}
        optional = {"revision": self.revision, "documents": self.documents, "chunks": self.chunks,
                    "skipped": self.skipped, "specDigest": self.digest,
                    "lastSyncTime": rfc3339(self.last_sync) if self.last_sync else None,
                    "lastAttemptTime": rfc3339(self.last_attempt) if self.last_attempt else None,
                    "lastHandledSyncRequest": self.handled_request}
        entry.update({k: v for k, v in optional.items() if v is not None})
        return entry


def sync_requests(annotations: Mapping[str, str] | None, names: list[str]) -> dict[str, str]:
    """source -> its pending request: the RAGEngine-wide ``ragengine.io/sync-now`` value and the source's own
    ``sync.ragengine.io/<source>`` value, joined (a new value of either is a new request)."""
    annotations = annotations or {}
    everyone = annotations.get(SYNC_NOW_ANNOTATION)
    out = {}
    for name in names:
        own = annotations.get(SOURCE_SYNC_ANNOTATION_PREFIX + name)
        if everyone is not None or own is not None:
            out[name] = f"{everyone or ''}|{own or ''}"[:1024]
    return out


def due(source: Source, state: SourceState | None, now: float, requested: str | None = None) -> bool:
    if state is None or state.digest != spec_digest(source) or state.last_attempt is None:
        return True
    if requested is not None and requested != state.handled_request:
        return True
    wait = period(source) if state.synced else retry_delay(state.failures)
    return now >= state.last_attempt + wait


def waiting(source: Source, state: SourceState | None, now: float) -> SourceState:
    """The engine is not ready: nothing was tried, so no failure is counted and no backoff grows."""
    base = state or SourceState(digest=None)
    return replace(base, synced=False, digest=spec_digest(source), message=WAITING_FOR_ENGINE, last_attempt=now)


def syncing(source: Source, state: SourceState | None, line: str, now: float) -> SourceState:
    """A sync under way (``line`` from sources.sync): behind, not failed."""
    base = state or SourceState(digest=None)
    return replace(base, synced=False, digest=spec_digest(source), message=line, last_attempt=now)


def after_sync(source: Source, state: SourceState | None, result: Any, now: float) -> SourceState:
    """``result``: a sources.sync.SyncResult."""
    base = state or SourceState(digest=None)
    digest = spec_digest(source)
    if not result.ok:
        return replace(base, synced=False, digest=digest, message=result.message, last_attempt=now,
                       failures=base.failures + 1)
    if result.message == "up to date" and base.synced and base.digest == digest:
        return replace(base, last_attempt=now, validators=result.validators or base.validators)
    return SourceState(digest=digest, synced=True, revision=result.revision, documents=result.documents,
                       chunks=result.chunks, skipped=result.skipped, last_sync=now, last_attempt=now,
                       message=result.message, failures=0, validators=result.validators,
                       handled_request=base.handled_request)


def visible(state: SourceState) -> tuple:
    """The part of a state that status shows, minus the clock: a check that changed none of it
    is not written (200 engines polling ConfigMaps must not write status every 30 s)."""
    return (state.digest, state.synced, state.revision, state.documents, state.chunks, state.skipped, state.message,
            state.handled_request)


def sources_condition(sources: list[Source], entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The SourcesSynced condition (without timestamps), or None when the spec has no sources."""
    if not sources:
        return None
    by_name = {e.get("name"): e for e in entries or []}
    behind: list[str] = []
    failed: list[str] = []
    for source in sources:
        entry = by_name.get(source.name)
        if entry is None:
            behind.append(f"{source.name}: not synced yet")
        elif entry.get("specDigest") != spec_digest(source):
            behind.append(f"{source.name}: spec changed, not synced yet")
        elif not entry.get("synced"):
            pending = entry.get("message") == WAITING_FOR_ENGINE or entry.get("message", "").startswith(SYNCING)
            (behind if pending else failed).append(
                f"{source.name}: {entry.get('message', '')}")
    if failed:
        reason, ok = "SyncFailed", False
    elif behind:
        reason, ok = "Progressing", False
    else:
        reason, ok = "Synced", True
    message = "; ".join(failed + behind) or f"{len(sources)} source(s) at their desired revision"
    return {"type": SOURCES_SYNCED, "status": "True" if ok else "False", "reason": reason, "message": message[:32768]}


def sync_event(source: Source, before: SourceState | None, after: SourceState, written: int) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event this sync deserves, or None."""
    if not after.synced:
        pending = after.message == WAITING_FOR_ENGINE or after.message.startswith(SYNCING)
        if pending or (before is not None and before.message == after.message):
            return None
        return "Warning", "SourceSyncFailed", f"source {source.name}: {after.message}"
    moved = before is None or before.revision != after.revision or not before.synced
    if written or moved:
        rev = (after.revision or "")[:12]
        return "Normal", "SourceSynced", f"source {source.name} at {rev}: {after.message}"
    return None
