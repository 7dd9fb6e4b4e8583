"""The reconcile loop's impure half: parse -> plan -> apply -> observe -> status -> events.

Level-based and idempotent: every call recomputes everything from the object and the cluster, so
a repeat, a timer tick or a restart after a crash all converge to the same children and status.
Calls for one RAGEngine are serialised by a lock (create/update, timer and child events may race).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from . import constants as c
from . import metrics
from .build.labels import Owner
from .kube import apply as kube
from .kube.observe import observe
from .reconcile.plan import plan
from .reconcile.status import compute_status
from .settings import OperatorSettings
from .spec import RAGEngineSpec

log = logging.getLogger(__name__)
STATUS_KEYS = ("observedGeneration", "conditions", "endpoint", "inferenceUrl", "model")


def spec_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"spec.{loc}: {err['msg']}" if loc else f"spec: {err['msg']}")
    return "; ".join(parts)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Controller:
    def __init__(self, api: k8s.ApiClient, settings: OperatorSettings) -> None:
        self.api = api
        self.settings = settings
        self._locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._applies = 0

    def owner(self, body: dict[str, Any]) -> Owner:
        meta = body["metadata"]
        s = self.settings
        return Owner(meta["namespace"], meta["name"], meta["uid"], engine_image=s.engine_image, vllm_image=s.vllm_image)

    def _apply(self, obj: dict[str, Any]) -> None:
        kube.server_side_apply(self.api, obj)
        self._applies += 1
        if self.settings.crash_after_applies and self._applies >= self.settings.crash_after_applies:
            log.error("fault injection: exiting after %d applies", self._applies)
            os._exit(17)  # a hard kill mid-reconcile: no cleanup, no status write

    # --- entry points (handlers call these) -------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> None:
        """Apply the desired children, then write status. Raises kopf errors that say what next."""
        with metrics.track(), self._locks[(namespace, name)]:
            body = kube.get(self.api, c.API_VERSION, c.KIND, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return  # gone or going: children follow through owner references
            owner = self.owner(body)
            try:
                spec = RAGEngineSpec.model_validate(body.get("spec") or {})
            except ValidationError as exc:
                message = spec_error(exc)
                self._write_status(body, owner, None, ("InvalidSpec", message), advance=True)
                raise kopf.PermanentError(f"invalid spec: {message}") from exc
            desired = plan(owner, spec)
            error = None
            try:
                for obj in desired.apply:
                    self._apply(obj)
                for ref in desired.delete:
                    kube.delete(self.api, ref.api_version, ref.kind, namespace, ref.name)
            except ApiException as exc:
                error = ("ApplyFailed", f"{_api_message(exc)}")
            self._write_status(body, owner, spec, error, advance=error is None)
            if error:
                raise kopf.TemporaryError(f"{error[0]}: {error[1]}", delay=10)

    def sync_status(self, namespace: str, name: str) -> None:
        """Recompute status from the children only (a child changed); never applies."""
        with self._locks[(namespace, name)]:
            body = kube.get(self.api, c.API_VERSION, c.KIND, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return
            try:
                spec = RAGEngineSpec.model_validate(body.get("spec") or {})
            except ValidationError:
                return  # reconcile reports it
            # A refused apply of the current generation still stands until a reconcile succeeds:
            # a child's event must not flip the RAGEngine back to Ready over it.
            self._write_status(body, self.owner(body), spec, pending_error(body), advance=False)

    # --- status ----------------------------------------------------------------------------------
    def _write_status(self, body: dict, owner: Owner, spec: RAGEngineSpec | None, error: tuple[str, str] | None,
                      advance: bool) -> None:
        current = body.get("status") or {}
        # observedGeneration moves only when a reconcile of that generation finished.
        generation = body["metadata"].get("generation") if advance else current.get("observedGeneration")
        observed = observe(self.api, owner, spec)
        status, changes = compute_status(owner, spec, generation, observed, current.get("conditions") or [], now(), error)
        if all(status.get(k) == current.get(k) for k in STATUS_KEYS):
            return
        try:
            kube.patch_status(self.api, owner.namespace, owner.name, status)
        except ApiException as exc:
            if exc.status == 404:
                return  # deleted since we read it: nothing to report on
            raise
        metrics.STATUS_WRITES.inc()
        if self.settings.post_events:
            # Ready and Degraded carry the story (kubectl describe); the component conditions'
            # transitions are in status and would triple the Event writes at scale.
            for cond in changes:
                if cond["type"] in (c.READY, c.DEGRADED):
                    self._event(body, cond)

    def _event(self, body: dict, cond: dict[str, Any]) -> None:
        # Warning when something broke; every other transition (incl. Ready=True) is Normal.
        bad = cond["type"] == c.DEGRADED and cond["status"] == "True"
        try:
            kube.post_event(self.api, body, "Warning" if bad else "Normal", cond["reason"],
                            f"{cond['type']}={cond['status']}: {cond['message']}")
        except ApiException as exc:  # events are best effort
            log.warning("could not post an event: %s", _api_message(exc))


def pending_error(body: dict[str, Any]) -> tuple[str, str] | None:
    """The apply/spec error that the last reconcile reported for a generation it did not finish."""
    status = body.get("status") or {}
    if status.get("observedGeneration") == body["metadata"].get("generation"):
        return None
    for cond in status.get("conditions") or []:
        if cond.get("type") == c.DEGRADED and cond.get("status") == "True" and cond.get("reason") in _SPEC_ERRORS:
            return cond["reason"], cond.get("message", "")
    return None


_SPEC_ERRORS = ("ApplyFailed", "InvalidSpec")


def _api_message(exc: ApiException) -> str:
    import json

    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except (ValueError, AttributeError):
        return f"{exc.status} {exc.reason}"
