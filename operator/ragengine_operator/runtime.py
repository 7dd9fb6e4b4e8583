"""The operator process's life: the side server (webhook, probes and the push receiver) on every replica,
the webhook's certificates kept fresh, the Lease, and kopf while this replica leads.

    start ─► side server ─► certificates (+ CRD's conversion stanza) ─► wait for the Lease ─┐
                                                                                          ▼
    exit ◄── release the Lease ◄── kopf stops (SIGTERM, or the lease lost) ◄── kopf runs (leader)

Without leader election (an operator run by hand, the tests' subprocess operators) kopf runs at once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import kopf

from . import metrics
from .conversion import certs, crd
from .conversion.server import SideServer
from .kube.client import new_api_client
from .leader import LeaseElector, Timing
from .receiver.start import receiver_app
from .settings import OperatorSettings

log = logging.getLogger(__name__)
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
KOPF_STALL_SECONDS = 60.0  # liveness fails when the leader's kopf loop has not ticked for this long
LOST_LEASE_GRACE_SECONDS = 2.0  # kopf gets this long to stop after the lease is lost, then the process exits


@dataclass
class ProcessState:
    """What /healthz reads; kopf's startup handler starts the heartbeat (handlers.py)."""

    leading: bool = False
    kopf_beat: float | None = None
    problems: list[str] = field(default_factory=list)

    def healthy(self) -> str | None:
        if self.leading and self.kopf_beat is not None and time.monotonic() - self.kopf_beat > KOPF_STALL_SECONDS:
            return f"kopf's event loop has not run for {time.monotonic() - self.kopf_beat:.0f} s"
        return None


def pod_namespace(settings: OperatorSettings) -> str:
    if settings.pod_namespace:
        return settings.pod_namespace
    if SA_NAMESPACE.exists():
        return SA_NAMESPACE.read_text().strip()
    raise RuntimeError("RAGENGINE_OPERATOR_POD_NAMESPACE is needed for the webhook's Secret and the Lease")


class Certificates:
    """The webhook's certificates: made or renewed, served, and published in the CRD; checked again hourly."""

    def __init__(self, settings: OperatorSettings, server: SideServer, namespace: str) -> None:
        self.settings, self.server, self.namespace = settings, server, namespace
        self.api = new_api_client(pool_size=2)
        service = settings.webhook_service or "ragengine-webhook"
        self.names = certs.dns_names(service, namespace, settings.cluster_domain)
        self.served: bytes | None = None

    def refresh(self) -> None:
        from kubernetes import client as k8s

        assert self.settings.webhook_secret, "webhook_port needs webhook_secret"
        got = certs.ensure(k8s.CoreV1Api(self.api), self.namespace, self.settings.webhook_secret, self.names,
                           manage=not self.settings.webhook_cert_manager)
        if got.cert_pem != self.served:
            self.server.reload(got.cert_pem, got.key_pem)
            self.served = got.cert_pem
        if self.settings.webhook_service:
            crd.sync_conversion(k8s.ApiextensionsV1Api(self.api), self.namespace, self.settings.webhook_service,
                                got.ca_bundle_pem)

    def keep_fresh(self, stop: threading.Event) -> None:
        """The first refresh until it works (RBAC, the API server: say why each time), then periodic ones."""
        delay = 1.0
        while not stop.is_set():
            try:
                self.refresh()
                delay = self.settings.webhook_cert_check_seconds
            except Exception as exc:
                log.warning("webhook certificates not ready: %s: %s", type(exc).__name__, exc)
                delay = min(max(delay * 2, 1.0), 30.0) if self.served is None else 60.0
            stop.wait(delay)


def wait_for_legacy_pods(settings: OperatorSettings, namespace: str, stop: threading.Event) -> None:
    """An upgrade from a release without leader election: its single operator pod knows no Lease, so the new
    leader starts kopf only once that pod is gone (the roll stops it once the new pods are ready)."""
    if not settings.legacy_pod_selector:
        return
    from kubernetes import client as k8s

    core, reported = k8s.CoreV1Api(new_api_client(pool_size=1)), 0.0
    while not stop.is_set():
        pods = core.list_namespaced_pod(namespace, label_selector=settings.legacy_pod_selector, _request_timeout=10).items
        running = [str(p.metadata.name) for p in pods if p.metadata is not None
                   and (p.status.phase if p.status else "") not in ("Succeeded", "Failed")]
        if not running:
            return
        if time.monotonic() - reported > 10:
            log.info("waiting for the operator pod(s) of the previous release to stop: %s", ", ".join(running))
            reported = time.monotonic()
        stop.wait(1.0)


def side_server(settings: OperatorSettings, healthy: Callable[[], str | None]) -> SideServer:
    """What every replica serves, leader or not: the conversion webhook, the probes, and with ``receiver_port``
    the push receiver (plain HTTP on its own port, as the chart's <release>-receiver Service expects), whose
    Kubernetes client is its own (kopf runs only where the replica leads)."""
    apps = {}
    if settings.receiver_port:
        apps[settings.receiver_port] = receiver_app(settings, new_api_client(pool_size=4))
        log.info("push receiver on http://0.0.0.0:%d/hook/<namespace>/<name>/<source>", settings.receiver_port)
    return SideServer(settings.webhook_port, settings.liveness_port, healthy, apps=apps)


def run(settings: OperatorSettings, namespaces: list[str]) -> int:
    state = ProcessState()
    stop = threading.Event()  # SIGTERM before kopf runs, or the lease lost
    server = side_server(settings, state.healthy)
    server.start()
    metrics.serve(settings.metrics_port)  # every replica: Prometheus scrapes them all
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    identity = settings.pod_name or socket.gethostname()
    elector: LeaseElector | None = None
    lost = threading.Event()
    try:
        if settings.webhook_port:
            certificates = Certificates(settings, server, pod_namespace(settings))
            threading.Thread(target=certificates.keep_fresh, args=(stop,), name="webhook-certs", daemon=True).start()
        if settings.leader_election:
            namespace = pod_namespace(settings)
            elector = LeaseElector(new_api_client(pool_size=2), namespace, settings.lease_name, identity, Timing(
                settings.lease_duration_seconds, settings.lease_renew_deadline_seconds, settings.lease_retry_period_seconds))
            if not elector.acquire(stop):
                return 0
            state.leading = True
            metrics.LEADER.set(1)
            threading.Thread(target=elector.renew, args=(stop, lost), name="lease", daemon=True).start()
            threading.Thread(target=_stop_when_lost, args=(lost, stop), name="lease-watch", daemon=True).start()
            wait_for_legacy_pods(settings, namespace, stop)
            if stop.is_set():
                return 1 if lost.is_set() else 0
        for sig, handler in previous.items():  # kopf handles SIGTERM itself from here (main thread)
            signal.signal(sig, handler)
        # No stop_flag: kopf waits for a threading.Event in an executor thread that is never released when a
        # signal stops it, and asyncio.run then waits for that thread forever. The lease watcher sends SIGTERM.
        kopf.run(standalone=True, clusterwide=not namespaces, namespaces=namespaces, liveness_endpoint=None,
                 memo=kopf.Memo(settings=settings, process=state))
        return 1 if lost.is_set() else 0
    finally:
        stop.set()
        if elector is not None:
            elector.release()
        metrics.LEADER.set(0)
        server.stop()


def _stop_when_lost(lost: threading.Event, stop: threading.Event) -> None:
    """Stop kopf when the lease is lost (the SIGTERM it stops on); if it has not stopped before anyone may take
    over, exit hard."""
    lost.wait()
    stop.set()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(LOST_LEASE_GRACE_SECONDS)
    log.error("kopf did not stop within %.0f s of losing the lease: exiting", LOST_LEASE_GRACE_SECONDS)
    os._exit(1)
