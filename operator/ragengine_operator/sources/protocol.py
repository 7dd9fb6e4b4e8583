"""The wire between the operator and a sync worker (sources/worker.py). Pure.

Contract:

- ``SyncRequest``: everything a worker needs except credentials: the action (``sync`` or ``prune``),
  the source's spec, the engine's URL, what the last sync left (revision, HTTP validators) and, for a
  configMap source, the resourceVersion the operator read. JSON: in the Job's environment, or on the
  subprocess's stdin. Credentials never travel in it (job mode: the kubelet mounts the source's Secret
  and sets the engine's key from a secretKeyRef; subprocess mode: they come on stdin beside it).
- ``encode_result`` / ``decode_result``: a ``SyncResult`` as one JSON text of at most ``RESULT_LIMIT``
  bytes, since the kubelet cuts a container's termination message at 4096 bytes. What does not fit
  goes in this order: the examples of skipped files, the end of the message, the HTTP validators (the
  next sync then downloads the URLs again instead of asking If-None-Match: slower, still correct).
  Validators are keyed by the URL's position in the source, not the URL (URLs may be 2 KB each).
- ``result_from_pod(status, request, limits)``: the result of a sync pod from its status: its
  termination message when that is a result, else a failed result naming what ended it (the memory
  limit, an image or a Secret key the kubelet cannot use, an exit without a result); None while it runs.
- ``result_from_exit(code, stderr, limits)``: the same for a subprocess that gave no result.
"""

from __future__ import annotations

import hashlib
import json
import signal
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ragengine_operator.sources.sync import SyncResult

# Where a sync Job's container finds its inputs (manifests/sync_job.py writes them, sources/worker.py reads).
REQUEST_ENV = "RAGENGINE_SYNC_REQUEST"
API_KEY_ENV = "RAGENGINE_SYNC_ENGINE_API_KEY"
CREDENTIALS_DIR = "/var/run/ragengine/credentials"
CONFIGMAP_DIR = "/var/run/ragengine/configmap"
RESULT_LIMIT = 4000  # bytes; the kubelet keeps 4096 of a termination message
CONTAINER = "sync"  # the container's name in the sync pod
# Waiting states of a container that will not start by itself: a sync is failed at once, not at its deadline.
CANNOT_START = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
                "CreateContainerError", "RunContainerError")


@dataclass(frozen=True)
class SyncRequest:
    action: Literal["sync", "prune"]
    name: str  # the source's name
    index: str
    engine_url: str
    source: dict[str, Any] | None = None  # the spec.sources[] entry (camelCase), for a sync
    known_revision: str | None = None  # the revision synced last (None: sync everything again)
    validators: dict[str, dict] | None = None  # http: url -> ETag / Last-Modified of the last sync
    configmap_revision: str | None = None  # configMap: the resourceVersion the operator read
    # The operator's sync span (W3C traceparent) and where traces go (endpoint, protocol, sampling ratio):
    # the worker continues the trace (sources/traced.py). Not part of the digest: each run has its own span.
    traceparent: str | None = None
    tracing: list | None = None
    # The operator's egress rules and fetch limits (sync.FetchPolicy's settings): the worker fetches under them.
    fetch_policy: dict[str, Any] | None = None
    # spec.evaluation.goldenSet.source's path when it names this source: handed to the engine, not indexed.
    golden_set_path: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SyncRequest:
        return cls(**json.loads(text))

    def digest(self) -> str:
        # untraced: the digest of the same request before tracing existed (a running Job is still recognised)
        same = {k: v for k, v in asdict(self).items()
                if k != "traceparent" and not (k in ("tracing", "fetch_policy", "golden_set_path") and v is None)}
        return hashlib.sha256(json.dumps(same, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]

    @property
    def urls(self) -> list[str]:
        return list(((self.source or {}).get("http") or {}).get("urls") or [])


@dataclass(frozen=True)
class Limits:
    """What bounds a sync, for the messages that say which bound ended it."""

    memory: str = "1Gi"
    cpu_seconds: int = 600
    deadline_seconds: int = 1800


def encode_result(result: SyncResult, urls: list[str], limit: int = RESULT_LIMIT) -> str:
    body = asdict(result)
    position = {url: str(i) for i, url in enumerate(urls)}
    body["validators"] = {position[u]: v for u, v in result.validators.items() if u in position}

    def text() -> str:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)

    if len(text().encode()) > limit:
        body["skipped_examples"] = {}
    if len(text().encode()) > limit:
        over = len(text().encode()) - limit
        body["message"] = body["message"].encode()[:max(0, len(body["message"].encode()) - over - 4)].decode(
            "utf-8", "ignore") + "..."
    if len(text().encode()) > limit:
        body["validators"] = {}
    return text()


def decode_result(text: str, urls: list[str]) -> SyncResult | None:
    """The SyncResult in ``text``, or None when it is not one (a log tail, an empty message)."""
    try:
        body = json.loads(text)
        by_position = dict(enumerate(urls))
        body["validators"] = {by_position[int(i)]: v for i, v in (body.get("validators") or {}).items()
                              if int(i) in by_position}
        return SyncResult(**body)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def failed(request: SyncRequest, message: str) -> SyncResult:
    kind = next((k for k in ("configMap", "git", "http", "s3") if k in (request.source or {})), request.action)
    return SyncResult(request.name, kind, ok=False, message=message)


def result_from_pod(status: dict[str, Any], request: SyncRequest, limits: Limits) -> SyncResult | None:
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != CONTAINER:
            continue
        state = cs.get("state") or {}
        ended = state.get("terminated")
        if ended:
            message = ended.get("message") or ""
            result = decode_result(message, request.urls)
            if result is not None:
                return result
            reason, code = ended.get("reason"), ended.get("exitCode")
            if reason == "OOMKilled":
                return failed(request, f"the sync was killed at its memory limit ({limits.memory}): the source is "
                                       "too large to fetch or parse within it")
            tail = message.strip().splitlines()[-1][:300] if message.strip() else ""
            return failed(request, f"the sync pod ended without a result ({reason}, exit code {code})"
                                   + (f": {tail}" if tail else ""))
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in CANNOT_START:
            return failed(request, f"the sync pod cannot start: {waiting['reason']}: {waiting.get('message', '')}"[:1024])
    if status.get("reason") == "DeadlineExceeded":
        return failed(request, f"the sync did not finish within its deadline ({limits.deadline_seconds} s)")
    if status.get("phase") in ("Succeeded", "Failed"):
        return failed(request, f"the sync pod {status['phase'].lower()} without a result")
    return None


def result_from_job(job: dict[str, Any] | None, request: SyncRequest, limits: Limits) -> SyncResult | None:
    """A failed result when the Job itself failed or went away (its pod may be gone with it), else None."""
    if job is None:
        return failed(request, "the sync Job was deleted before it reported a result")
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            if cond.get("reason") == "DeadlineExceeded":
                return failed(request, f"the sync did not finish within its deadline ({limits.deadline_seconds} s)")
            return failed(request, f"the sync Job failed: {cond.get('reason')}: {cond.get('message', '')}"[:1024])
    return None


def result_from_exit(code: int | None, stderr: str, request: SyncRequest, limits: Limits) -> SyncResult:
    """A subprocess that ended without printing a result."""
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        return failed(request, f"the sync was killed at its CPU-time limit ({limits.cpu_seconds} s of CPU)"
                      if code == -signal.SIGXCPU else "the sync process was killed (SIGKILL)")
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    tail = f": {lines[-1][:300]}" if lines else ""
    if "MemoryError" in stderr:
        return failed(request, f"the sync ran out of memory at its limit ({limits.memory}){tail}")
    return failed(request, f"the sync process exited with code {code} without a result{tail}")


@dataclass(frozen=True)
class Prepared:
    """A sync (or prune) ready for a worker: the request, and what the worker reads by reference."""

    request: SyncRequest
    credentials: str | None = None  # the source's Secret
    configmap: str | None = None  # a configMap source's ConfigMap
    api_key: tuple[str, str] | None = None  # the engine's key (Secret, key); None when auth is off
    service_account: str | None = None  # job mode: the sync pod's ServiceAccount (an S3 workload identity)


@dataclass
class Inputs:
    """What a subprocess worker gets on stdin beside the request (read by the operator, subprocess mode)."""

    credentials: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    configmap: dict[str, Any] | None = None  # {"data": {...}, "binaryData": {...}}

    def payload(self, request: SyncRequest) -> bytes:
        return json.dumps({"request": json.loads(request.to_json()), "credentials": self.credentials,
                           "api_key": self.api_key, "configmap": self.configmap}).encode()
