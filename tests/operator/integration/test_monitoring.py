"""spec.monitoring on the real control plane, with the operator under the chart's RBAC: on a cluster
without the Prometheus operator's CRDs the missing kind is reported (and nothing else breaks); once
the ServiceMonitor CRD is there the monitors appear, vLLM's NetworkPolicy admits Prometheus, and
removing `monitoring` deletes them. A RAGEngine that does not ask never touches the kind."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from ragengine_operator import constants as c

from .kube import wait_for

GROUP, VERSION, PLURAL = "monitoring.coreos.com", "v1", "servicemonitors"
# The kind as the Prometheus operator's CRD serves it (its schema does not matter to the operator).
SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"plural": PLURAL, "singular": "servicemonitor", "kind": "ServiceMonitor",
                       "listKind": "ServiceMonitorList"},
             "versions": [{"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}
SPEC = {"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "storage": {"volume": {"size": "1Gi"}},
        "observability": {"metrics": {}}}


@pytest.fixture
def no_service_monitor_crd(kube):
    ext = k8s.ApiextensionsV1Api(kube.api)
    name = SERVICE_MONITOR_CRD["metadata"]["name"]
    with pytest.raises(ApiException):
        ext.read_custom_resource_definition(name)  # this test owns the kind: it must not exist yet
    yield ext
    try:
        ext.delete_custom_resource_definition(name)
    except ApiException as exc:
        assert exc.status == 404


def monitors(kube, ns: str) -> list[str]:
    items = k8s.CustomObjectsApi(kube.api).list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
    return sorted(m["metadata"]["name"] for m in items)


def test_monitoring_without_then_with_the_prometheus_operator(kube, namespace, no_service_monitor_crd):
    ns, n = namespace, "scraped"
    kube.create_rag(ns, n, SPEC)
    cond = wait_for(lambda: (x := kube.condition(ns, n, c.DEGRADED)) and x["status"] == "True" and x, 30, "Degraded")
    assert cond["reason"] == "ApplyFailed" and "does not serve monitoring.coreos.com/v1 ServiceMonitor" in cond["message"]
    wait_for(lambda: kube.exists("Deployment", ns, f"{n}-inference"), 20, "the other children applied")
    policy = k8s.NetworkingV1Api(kube.api).read_namespaced_network_policy(f"{n}-inference", ns)
    peers = kube.api.sanitize_for_serialization(policy)["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}} in peers

    no_service_monitor_crd.create_custom_resource_definition(SERVICE_MONITOR_CRD)
    wait_for(lambda: monitors(kube, ns) == [f"{n}-engine", f"{n}-inference"], 60, "both ServiceMonitors")
    wait_for(lambda: kube.condition(ns, n, c.DEGRADED)["status"] == "False", 30, "Degraded cleared")
    sm = k8s.CustomObjectsApi(kube.api).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, f"{n}-inference")
    assert sm["spec"]["endpoints"][0] == {"port": "http", "path": "/metrics", "interval": "30s"}
    assert sm["metadata"]["ownerReferences"][0]["kind"] == c.KIND

    kube.patch_rag(ns, n, {"spec": {"observability": {"metrics": None}}})
    wait_for(lambda: monitors(kube, ns) == [], 30, "the monitors deleted with spec.monitoring")
    kube.wait_ready(ns, n)
