"""kopf settings, explicit and explained, plus the operator's shared state on kopf's memo."""

from __future__ import annotations

import logging
import socket

import kopf

from . import constants as c
from .controller import Controller
from .kube.client import new_api_client
from .settings import OperatorSettings


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger) -> None:
    ours: OperatorSettings = getattr(memo, "settings", None) or OperatorSettings()
    memo.settings = ours
    # One kopf at a time: the Lease decides which replica runs it (leader.py), not kopf's peering.
    settings.peering.standalone = True
    # kopf's bookkeeping under our group, in annotations: status stays strictly typed (the CRD
    # does not preserve unknown status fields) and no clash with other kopf operators. No handler
    # needs a finalizer; kopf removes the one older releases put on objects.
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.KOPF_ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=c.KOPF_ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Bounded watches and requests: idle watch connections are re-opened instead of going silent
    # (kopf #698, #204; dask-kubernetes uses the same pattern), and a dead API server fails fast.
    settings.watching.server_timeout = ours.watch_timeout_seconds
    settings.watching.client_timeout = ours.watch_timeout_seconds + 30
    settings.watching.connect_timeout = 5
    # Server-side label selectors on the child watches: the API server sends only our Deployments
    # and pods, not every Deployment and pod of the cluster (the handlers' own filters are client-side).
    managed = f"{c.LABEL_MANAGED_BY}={c.FIELD_MANAGER}"
    settings.watching.label_selectors[lambda r: (r.group, r.plural) in (("apps", "deployments"), ("", "pods"))] = managed
    # Roles in the watched namespaces only (the chart, exact namespace names): no cluster-wide listing of
    # namespaces and CRDs, which such an operator may not do; kopf takes the names as given.
    settings.scanning.disabled = not ours.scan_cluster
    settings.networking.request_timeout = 30
    settings.networking.connect_timeout = 5
    # Sync handlers run in this many threads: independent RAGEngines reconcile in parallel.
    settings.execution.max_workers = ours.max_workers
    settings.execution.default_backoff = 5
    # kopf's own per-handler "succeeded" events would flood `kubectl get events`; we post
    # transitions and distinct failures ourselves (kopf.event). Keep kopf's for errors only.
    settings.posting.level = logging.ERROR
    settings.posting.reporting_component = c.FIELD_MANAGER  # the "From" column of kubectl describe
    settings.posting.reporting_instance = socket.gethostname()
    memo.controller = Controller(new_api_client(pool_size=ours.max_workers * 2), ours)
    logger.info("ragengine-operator configured: resync=%ss metrics=:%s", ours.resync_seconds, ours.metrics_port)
