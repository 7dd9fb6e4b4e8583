"""Every kopf handler, each a few lines: resolve the object, call the controller.

Run with `ragengine-operator` (see __main__.py) or `kopf run -m ragengine_operator.handlers`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from . import constants as c
from .kube.client import kopf_login
from .startup import configure

RAG = (c.GROUP, c.VERSION, c.PLURAL)


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    configure(settings, memo, logger)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf_login(**kwargs)


# resume: re-adopt existing objects after a restart (also after a crash mid-reconcile).
@kopf.on.resume(*RAG)
@kopf.on.create(*RAG)
@kopf.on.update(*RAG)
def reconcile(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    memo.controller.reconcile(namespace, name)


@kopf.daemon(*RAG, cancellation_timeout=2.0)
async def resync(namespace: str, name: str, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
    """Level-based safety net: re-apply and recompute status every resync_seconds."""
    while not stopped:
        await stopped.wait(memo.settings.resync_seconds)
        if not stopped:
            try:
                await asyncio.to_thread(memo.controller.reconcile, namespace, name)
            except (kopf.TemporaryError, kopf.PermanentError):
                pass  # already reported in status; the next tick retries


def _owner(body: kopf.Body) -> str | None:
    for ref in body.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == c.KIND and ref.get("apiVersion", "").startswith(c.GROUP + "/") and ref.get("controller"):
            return ref["name"]
    return None


@kopf.on.event("apps", "v1", "deployments", labels={c.LABEL_MANAGED_BY: c.FIELD_MANAGER})
def child_deployment(event: kopf.RawEvent, body: kopf.Body, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    """A child's status moved: recompute the owner's status now (Ready within a second)."""
    owner = _owner(body)
    if owner is None:
        return
    try:
        if event.get("type") == "DELETED":
            memo.controller.reconcile(namespace, owner)  # someone deleted it: put it back
        else:
            memo.controller.sync_status(namespace, owner)
    except (kopf.TemporaryError, kopf.PermanentError) as exc:
        logging.getLogger(__name__).info("owner %s/%s not reconciled now: %s", namespace, owner, exc)
