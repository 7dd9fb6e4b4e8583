"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it.

Every replica serves the conversion webhook; only the leader runs kopf, so no RAGEngine is reconciled by
two operators at once. Timing (client-go's rules): a leader that cannot renew within ``renew_deadline``
stops leading (the process exits: kopf is never left running without the lease); a candidate takes the
lease once it has seen the same record unchanged for ``lease_duration`` by its OWN clock (no trust in other
clocks), so with renew_deadline < lease_duration the old leader has stopped before anyone takes over. A
leader that stops on purpose (SIGTERM, a roll) releases the lease, and a candidate takes it at its next try.

Why not kubernetes.leaderelection (the client's own): it cannot release the lease on shutdown (a roll would
wait out the whole lease), sets no request timeouts (one hung call outlives the renew deadline), and runs
the leader's work in a daemon thread it cannot stop.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)
REQUEST_TIMEOUT = 5


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retryPeriod < renewDeadline < leaseDuration")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class LeaseElector:
    def __init__(self, api: k8s.ApiClient, namespace: str, name: str, identity: str, timing: Timing = Timing()) -> None:
        self.coordination = k8s.CoordinationV1Api(api)
        self.namespace, self.name, self.identity, self.timing = namespace, name, identity, timing
        self._observed: tuple[str | None, str | None] = (None, None)  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic: when that record was first seen
        self._renewed_at = 0.0
        self.leading = False

    # -- one try -----------------------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew: True when we hold the lease afterwards."""
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading Lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
                return False
            return self._create()
        spec = lease.spec or k8s.V1LeaseSpec()
        record = (spec.holder_identity or None, str(spec.renew_time) if spec.renew_time else None)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        holder = record[0]
        expired = time.monotonic() - self._observed_at >= float(spec.lease_duration_seconds or self.timing.lease_duration)
        if holder not in (None, self.identity) and not expired:
            return False
        now = _now()
        took_over = holder != self.identity
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = int(self.timing.lease_duration)
        spec.renew_time = now
        if took_over:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + (1 if holder else 0)
        lease.spec = spec
        try:
            self.coordination.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:  # 409: someone else wrote first
            if exc.status != 409:
                log.warning("updating Lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
            return False
        if took_over:
            log.info("%s took the lease %s/%s from %s", self.identity, self.namespace, self.name, holder or "nobody")
        self._observed, self._observed_at = (self.identity, str(now)), time.monotonic()
        return True

    def _create(self) -> bool:
        now = _now()
        body = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
                           spec=k8s.V1LeaseSpec(holder_identity=self.identity, acquire_time=now, renew_time=now,
                                                lease_duration_seconds=int(self.timing.lease_duration),
                                                lease_transitions=0))
        try:
            self.coordination.create_namespaced_lease(self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 409:
                log.warning("creating Lease %s/%s failed: %s", self.namespace, self.name, exc.reason)
            return False
        log.info("%s created and holds the lease %s/%s", self.identity, self.namespace, self.name)
        return True

    # -- the loops ------------------------------------------------------------------------------------------
    def acquire(self, stop: threading.Event) -> bool:
        """Block until this replica leads (True) or ``stop`` is set (False)."""
        log.info("%s waits to lead (Lease %s/%s)", self.identity, self.namespace, self.name)
        while not stop.is_set():
            if self.try_acquire_or_renew():
                self.leading, self._renewed_at = True, time.monotonic()
                return True
            stop.wait(self.timing.retry_period)
        return False

    def renew(self, stop: threading.Event, lost: threading.Event) -> None:
        """Renew every retry period until ``stop``; set ``lost`` once the renew deadline passes without one."""
        while not stop.wait(self.timing.retry_period):
            if self.try_acquire_or_renew():
                self._renewed_at = time.monotonic()
            elif time.monotonic() - self._renewed_at >= self.timing.renew_deadline:
                log.error("%s could not renew the lease %s/%s for %.0f s: it stops leading", self.identity,
                          self.namespace, self.name, self.timing.renew_deadline)
                self.leading = False
                lost.set()
                return

    def release(self) -> None:
        """Give the lease up so a candidate takes it at its next try (client-go's ReleaseOnCancel)."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = _now()
            self.coordination.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=REQUEST_TIMEOUT)
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        except ApiException as exc:
            log.warning("releasing Lease %s/%s failed (a candidate takes it when it expires): %s",
                        self.namespace, self.name, exc.reason)
