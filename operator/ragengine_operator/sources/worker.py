"""``ragengine-operator sync-source``: one sync (or prune) of one source, in a process of its own.

This process fetches and parses tenant data (git repositories, HTTP bodies, S3 objects, PDF, HTML, globs), so it
holds nothing a tenant could turn against others: no Kubernetes token (a Job pod without one, or a
subprocess with an empty environment), only this source's credentials and its engine's key, under
its own memory, CPU and time limits. It reports only through its result, never to the API server.

- Job mode (manifests/sync_job.py): the request in ``$RAGENGINE_SYNC_REQUEST``, the engine's key in
  ``$RAGENGINE_SYNC_ENGINE_API_KEY`` (a secretKeyRef), the source's Secret mounted at
  ``CREDENTIALS_DIR`` and a configMap source's ConfigMap at ``CONFIGMAP_DIR``. The result goes to
  ``/dev/termination-log``, which the operator reads from the pod's status.
- Subprocess mode (``--stdin``): one JSON object on stdin (protocol.Inputs.payload).

Either way stdout carries ``PROGRESS <line>`` after each batch written and then ``RESULT <json>``.
The sync itself is sources/sync.py's ``sync_source`` (fetch, plan, push), as it always was.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ragengine_operator.sources.engine import EngineClient, EngineUnavailable
from ragengine_operator.sources.fetch import Fetched, FetchError, from_configmap
from ragengine_operator.sources.plan import SyncPlan
from ragengine_operator.sources.protocol import (
    API_KEY_ENV,
    CONFIGMAP_DIR,
    CREDENTIALS_DIR,
    REQUEST_ENV,
    SyncRequest,
    encode_result,
    failed,
)
from ragengine_operator.sources.sync import FetchPolicy, SyncResult, fetch, sync_source
from ragengine_operator.spec.sources import Source

TERMINATION_LOG = "/dev/termination-log"


def run(request: SyncRequest, credentials: dict[str, str], api_key: str | None, configmap: dict[str, Any] | None,
        workdir: Path, progress: Any = None) -> SyncResult:
    """One sync or prune; never raises: every failure is a failed result with its reason. With a traceparent
    in the request, its trace goes on here and, through the engine client's calls, in the engine."""
    engine = EngineClient(request.engine_url, api_key)
    if not (request.traceparent and request.tracing):
        return _run(request, engine, credentials, configmap, workdir, progress)
    # OpenTelemetry is imported only for a traced sync: an untraced worker starts as small as it was
    from ragengine_operator.sources import traced

    with traced.worker_span(request, engine.http) as span:
        result = _run(request, engine, credentials, configmap, workdir, progress)
        traced.record(span, result)
        return result


def _run(request: SyncRequest, engine: EngineClient, credentials: dict[str, str], configmap: dict[str, Any] | None,
         workdir: Path, progress: Any) -> SyncResult:
    try:
        if request.action == "prune":
            ids = sorted(engine.indexed(request.index, request.name))
            engine.apply(request.index, SyncPlan(delete=ids))
            return SyncResult(request.name, "prune", ok=True, written=len(ids),
                              message=f"{len(ids)} document(s) deleted from index {request.index}")
        source = Source.model_validate(request.source)
        known = request.known_revision
        if known is not None and not engine.has_index(source.index_name):
            known = None  # the index was lost (a new volume): sync everything again
        golden = request.golden_set_path
        if golden and known is not None:  # the engine lost its golden set, or the path changed: read it again
            held = engine.golden_set(source.index_name)
            if held is None or (held.get("source"), held.get("path"), held.get("revision")) != (source.name, golden,
                                                                                                 known):
                known = None
        validators = request.validators if known else None

        def read() -> Fetched:
            if source.config_map is not None:
                if configmap is None or request.configmap_revision is None:
                    raise FetchError(f"ConfigMap {source.config_map.name} was not given to the sync")
                if request.configmap_revision == known:
                    return Fetched(known, unchanged=True)
                return from_configmap(configmap.get("data"), configmap.get("binaryData"), source.config_map.keys,
                                      request.configmap_revision,
                                      FetchPolicy.from_request(request.fetch_policy).limits_for(source))
            return fetch(source, cache=workdir / "git", secret=credentials or None, previous_revision=known,
                         previous_validators=validators, policy=FetchPolicy.from_request(request.fetch_policy),
                         held=lambda: engine.documents_of(source.index_name, source.name), golden_set_path=golden)

        return sync_source(source, engine, read, known, progress, golden)
    except EngineUnavailable as exc:
        return failed(request, f"not synced: {exc}")
    except MemoryError:
        return failed(request, "not synced: out of memory: the source is too large to fetch or parse within the "
                               "sync's memory limit")
    except Exception as exc:  # the process boundary: whatever went wrong is the source's status
        return failed(request, f"not synced: {type(exc).__name__}: {exc}"[:2048])
    finally:
        engine.close()


def read_dir(path: str) -> dict[str, bytes] | None:
    """The keys of a mounted Secret or ConfigMap (the kubelet's ``..data`` entries are not keys)."""
    root = Path(path)
    if not root.is_dir():
        return None
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if not p.name.startswith("..") and p.is_file()}


def main(argv: list[str]) -> int:
    if "--stdin" in argv:
        payload = json.load(sys.stdin)
        request = SyncRequest(**payload["request"])
        credentials, api_key, configmap = payload.get("credentials") or {}, payload.get("api_key"), payload.get("configmap")
    else:
        request = SyncRequest.from_json(os.environ[REQUEST_ENV])
        api_key = os.environ.get(API_KEY_ENV) or None
        creds = read_dir(CREDENTIALS_DIR) or {}
        credentials = {k: v.decode("utf-8", "replace") for k, v in creds.items()}
        files = read_dir(CONFIGMAP_DIR)
        configmap = None if files is None else {"binaryData": {k: base64.b64encode(v).decode() for k, v in files.items()}}

    def progress(line: str) -> None:
        print(f"PROGRESS {line}", flush=True)

    with tempfile.TemporaryDirectory(prefix="ragengine-sync-") as workdir:
        result = run(request, credentials, api_key, configmap, Path(workdir), progress)
    text = encode_result(result, request.urls)
    if "--stdin" not in argv and os.access(TERMINATION_LOG, os.W_OK):
        Path(TERMINATION_LOG).write_text(text)
    print(f"RESULT {text}", flush=True)
    return 0
