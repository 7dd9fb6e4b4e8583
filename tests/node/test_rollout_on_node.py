"""A spec change rolls the engine with no failed request: two replicas on PostgreSQL, on the real node.

A client loops on /retrieve through the Service (kube-proxy) from the host while a spec change makes the
operator roll the engine Deployment. With `maxUnavailable: 0`, readiness gates and the engine draining
before it stops, not one request may fail. PostgreSQL (with pgvector) runs on this machine at its own
address, where the pods reach it.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.node.conftest import ON_NODE, service_base, wait_condition, wait_service_ready
from tests.operator.integration.kube import Kube, wait_for
from tests.support.postgres import postgres_server

NAME = "replicated"
KEY = "e2e-rollout-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
POD_CIDR = "10.85.0.0/16"  # hack/node.sh


@pytest.fixture(scope="module")
def database(host_ip):
    with postgres_server(listen=host_ip, trust_cidr=POD_CIDR) as url:
        yield url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="module")
def replicated(kube: Kube, chart_operator, namespace, database) -> str:
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "rollout"},
                                                   "stringData": {"key": KEY, "url": database}})
    kube.create_rag(namespace, NAME, {
        "engine": {**ON_NODE, "replicas": 2},
        "storage": {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "rollout", "key": "url"}},
                    "sessions": {"databaseSecretRef": {"name": "rollout", "key": "url"}}},
        "auth": {"apiKeySecretRef": {"name": "rollout", "key": "key"}},
    })
    wait_condition(kube, namespace, NAME, "Ready", "True", 240)
    wait_service_ready(kube, namespace, NAME, AUTH)
    return namespace


def _deployment_done(kube: Kube, ns: str, generation_before: int):
    dep = kube.apps.read_namespaced_deployment(f"{NAME}-engine", ns)
    st, want = dep.status, dep.spec.replicas
    return (dep.metadata.generation > generation_before and st.observed_generation >= dep.metadata.generation
            and st.updated_replicas == want and st.available_replicas == want and (st.replicas or 0) == want)


def test_a_rolling_update_drops_no_request(kube, replicated):
    base = service_base(kube, replicated, NAME)
    doc = {"doc_id": "press-2", "text": "Press 2 gets new hydraulic oil every 500 operating hours."}
    assert httpx.post(f"{base}/index", headers=AUTH, timeout=120,
                      json={"index_name": "plant", "documents": [doc]}).status_code == 200
    outcomes: list[str] = []
    stop = threading.Event()

    slowest: list[float] = [0.0]

    def client() -> None:
        # 30 s: a request slowed by two pods starting on 2 cores is not a dropped one; one that the engine
        # gave up on (its store pool waits 10 s) still shows as its 503.
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    r = http.post(f"{base}/retrieve", headers=AUTH,
                                  json={"index_name": "plant", "query": "hydraulic oil of press 2"})
                    ok = r.status_code == 200 and r.json()["results"][0]["doc_id"] == "press-2"
                    outcomes.append("ok" if ok else f"{r.status_code} {r.text[:120]}")
                except httpx.HTTPError as exc:
                    outcomes.append(type(exc).__name__)
                slowest[0] = max(slowest[0], time.monotonic() - started)

    worker = threading.Thread(target=client, daemon=True)
    worker.start()
    try:
        wait_for(lambda: len(outcomes) >= 20, 60, "the client to get going")
        generation = kube.apps.read_namespaced_deployment(f"{NAME}-engine", replicated).metadata.generation
        kube.patch_rag(replicated, NAME, {"spec": {"retrieval": {"similarityThreshold": 0.31}}})  # new pod env
        wait_for(lambda: _deployment_done(kube, replicated, generation), 300, "the engine rollout to complete")
        done = len(outcomes)  # requests after the last old pod left must succeed too
        wait_for(lambda: len(outcomes) >= done + 20, 60, "20 more requests after the rollout")
    finally:
        stop.set()
        worker.join(timeout=30)
    failed = [o for o in outcomes if o != "ok"]
    assert not failed, (f"{len(failed)} of {len(outcomes)} requests failed during the rollout: {sorted(set(failed))} "
                        f"(slowest {slowest[0]:.1f} s)")
    assert len(outcomes) > 50
