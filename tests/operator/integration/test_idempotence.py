"""Reconcile is idempotent (a repeat writes nothing) and API refusals surface as Degraded/ApplyFailed."""

from __future__ import annotations

import time

from ragengine_operator import constants as c
from ragengine_operator.controller import Controller
from ragengine_operator.kube.client import new_api_client
from ragengine_operator.settings import OperatorSettings

from .kube import wait_for

SPEC = {"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "storage": {"volume": {"size": "1Gi"}}}


def versions(kube, ns: str, n: str) -> dict[str, str]:
    return {
        "vllm": kube.apps.read_namespaced_deployment(f"{n}-inference", ns).metadata.resource_version,
        "engine": kube.apps.read_namespaced_deployment(f"{n}-engine", ns).metadata.resource_version,
        "svc": kube.core.read_namespaced_service(n, ns).metadata.resource_version,
        "pvc": kube.core.read_namespaced_persistent_volume_claim(f"{n}-data", ns).metadata.resource_version,
        "rag": kube.get_rag(ns, n)["metadata"]["resourceVersion"],
    }


def settled(kube, ns: str, n: str, quiet_s: float = 3.0, timeout_s: float = 60.0) -> dict[str, str]:
    """The objects' versions once none has changed for ``quiet_s``: Ready is reported from inside the
    operator's handler, and kopf writes the object once more after the handler returns (its own annotation),
    which must not be taken for a write of the repeat reconciles."""
    last, since, end = versions(kube, ns, n), time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < end, "the objects kept changing"
        time.sleep(0.5)
        now = versions(kube, ns, n)
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_repeat_reconcile_writes_nothing(kube, namespace):
    ns, n = namespace, "idem"
    kube.create_rag(ns, n, SPEC)
    kube.wait_ready(ns, n)
    before = settled(kube, ns, n)
    # The same code path as the operator, called directly: server-side apply of unchanged objects
    # and an unchanged status are no-ops (no new resourceVersion, no rollout, no status write).
    controller = Controller(new_api_client(), OperatorSettings())
    for _ in range(3):
        controller.reconcile(ns, n)
    assert versions(kube, ns, n) == before


def test_refused_apply_reports_degraded(kube, namespace):
    ns, n = namespace, "grow"
    kube.create_rag(ns, n, SPEC)
    kube.wait_ready(ns, n)
    # The CRD allows growing the volume; this cluster's StorageClass cannot expand it, so the API
    # server refuses the PVC change: the RAGEngine says so instead of pretending.
    kube.patch_rag(ns, n, {"spec": {"storage": {"volume": {"size": "2Gi"}}}})
    cond = wait_for(lambda: (x := kube.condition(ns, n, c.DEGRADED)) and x["status"] == "True" and x, 30, "Degraded")
    assert cond["reason"] == "ApplyFailed" and f"{n}-data" in cond["message"], cond
    assert kube.condition(ns, n, c.READY)["status"] == "False"
    rag = kube.get_rag(ns, n)
    assert rag["status"]["observedGeneration"] < rag["metadata"]["generation"]  # not reconciled yet
