"""Leader election between operator processes (operator/ragengine_operator/leader.py, runtime.py; issue 48).

Real `ragengine-operator` processes under the chart's ServiceAccount and Role: one holds the Lease and
reconciles, the others wait. Killed (kill -9, as a node's loss), the leader is replaced within 15 s; stopped
(SIGTERM, as a roll or a drain), it releases the Lease and is replaced at the next try. No process reconciles
before it holds the Lease, so no RAGEngine is reconciled by two operators at once. Every process serves the
push receiver (its side server, before the Lease): a push to the one that waits is synced by the leader.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from ragengine_operator.receiver.verify import sign_standard
from tests.support.server import port_for_external_server

from .conftest import OPERATOR_ENV, OPERATOR_NAMESPACE, ROOT
from .kube import wait_for
from .test_sources import wait_source

pytestmark = pytest.mark.cluster
LEASE = "rag-ragengine"  # the chart's release "rag" (conftest's helm_template): its Role names this Lease


class Operator:
    def __init__(self, name: str, ns: str, engine_url: str, log_dir: Path) -> None:
        self.name, self.log = name, log_dir / f"{name}.log"
        self.receiver_port = port_for_external_server()
        env = {**os.environ, **OPERATOR_ENV, "RAGENGINE_OPERATOR_ENGINE_URL": engine_url,
               "RAGENGINE_OPERATOR_RECEIVER_PORT": str(self.receiver_port),
               "RAGENGINE_OPERATOR_LEADER_ELECTION": "true", "RAGENGINE_OPERATOR_LEASE_NAME": LEASE,
               "RAGENGINE_OPERATOR_POD_NAMESPACE": OPERATOR_NAMESPACE, "RAGENGINE_OPERATOR_POD_NAME": name}
        self.proc = subprocess.Popen([str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", ns],
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def holder(kube) -> str | None:
    try:
        lease = k8s.CoordinationV1Api(kube.api).read_namespaced_lease(LEASE, OPERATOR_NAMESPACE)
    except ApiException:
        return None
    return lease.spec.holder_identity if lease.spec else None


def reconciled_before_leading(op: Operator) -> list[str]:
    """The reconciles a process logged before it took the Lease (there must be none)."""
    text = op.text()
    took = re.search(r"took the lease|created and holds the lease", text)
    before = text[:took.start()] if took else text
    return [line for line in before.splitlines() if "Handler 'reconcile'" in line]


def push_to_the_replica_that_waits(kube, ns: str, name: str, port: int) -> None:
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "faq"}, "data": {"a.md": "# A\n\nAlpha.\n"}})
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "hook"}, "stringData": {"token": "push-key"}})
    kube.patch_rag(ns, name, {"spec": {"sources": [{"name": "faq", "index": f"faq-{ns}", "configMap": {"name": "faq"},
                                                    "webhook": {"type": "generic", "secretRef": {"name": "hook"}}}]}})
    wait_source(kube, ns, name, "faq", "the first sync", lambda e: e["synced"])
    body, stamp = b"{}", int(time.time())
    resp = httpx.post(f"http://127.0.0.1:{port}/hook/{ns}/{name}/faq", content=body, timeout=30, headers={
        "webhook-id": "p-1", "webhook-timestamp": str(stamp), "webhook-signature": sign_standard("push-key", "p-1", stamp, body)})
    assert resp.status_code == 202, resp.text
    wait_source(kube, ns, name, "faq", "the leader's sync of the push", lambda e: e.get("lastHandledSyncRequest") == "|p-1",
                timeout=30)


def test_one_leader_reconciles_and_a_killed_or_stopped_one_is_replaced(kube, operator_identity, bare_namespace,
                                                                       source_engine, tmp_path):
    ns = bare_namespace
    ops = {n: Operator(n, ns, source_engine, tmp_path) for n in ("op-a", "op-b")}
    try:
        first = wait_for(lambda: holder(kube) in ops and holder(kube), 120, "a leader")
        (second,) = set(ops) - {first}
        kube.create_rag(ns, "led", {"storage": {"volume": {"size": "1Gi"}}})
        kube.wait_ready(ns, "led", timeout=120)  # the leader reconciled it
        assert "Handler 'reconcile'" in ops[first].text()
        assert not reconciled_before_leading(ops[second])
        assert holder(kube) == first

        # a signed push to the replica that waits: its side server takes it, the leader runs the sync
        push_to_the_replica_that_waits(kube, ns, "led", ops[second].receiver_port)

        # kill -9: the other takes over once the lease has gone unrenewed for its duration (10 s)
        killed = time.monotonic()
        ops[first].proc.kill()
        wait_for(lambda: holder(kube) == second, 30, f"{second} to take the lease")
        took_over_s = time.monotonic() - killed
        print(f"\nleader killed: {second} holds the lease after {took_over_s:.1f} s")
        assert took_over_s <= 15
        kube.patch_rag(ns, "led", {"spec": {"retrieval": {"similarityThreshold": 0.42}}})
        kube.wait_ready(ns, "led", timeout=60)  # the new leader reconciled the new generation
        assert not reconciled_before_leading(ops[second])

        # SIGTERM: the leader releases the lease; a waiting process takes it at its next try
        ops["op-c"] = Operator("op-c", ns, source_engine, tmp_path)
        wait_for(lambda: "waits to lead" in ops["op-c"].text(), 120, "op-c to wait for the lease")
        stopped = time.monotonic()
        ops[second].stop()
        assert "released the lease" in ops[second].text()
        wait_for(lambda: holder(kube) == "op-c", 30, "op-c to take the released lease")
        released_s = time.monotonic() - stopped
        print(f"leader stopped: op-c holds the lease {released_s:.1f} s after the SIGTERM")
        assert released_s <= 5
        kube.patch_rag(ns, "led", {"spec": {"retrieval": {"similarityThreshold": 0.43}}})
        kube.wait_ready(ns, "led", timeout=60)
        assert not reconciled_before_leading(ops["op-c"])
    finally:
        for op in ops.values():
            op.stop()
        kube.delete_all_ragengines(ns, force=True)
    for op in ops.values():
        assert "Traceback" not in op.text(), op.text()[-3000:]
