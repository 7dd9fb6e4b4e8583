"""The vLLM NetworkPolicy the operator renders, enforced on the real node (kube-router's firewall).

vLLM cannot run here (no GPU), so a stand-in pod wears vLLM's labels and answers HTTP on vLLM's port; the
policy is exactly what ``manifests.inference.inference_network_policy`` renders for a RAGEngine with
`spec.monitoring`. Probes run from pods (traffic from the node itself is always allowed): a pod with the
engine's labels and a Prometheus pod get through, any other pod does not (each probe first proves the
firewall knows the new pod: conftest.reach).
"""

from __future__ import annotations

import uuid

import pytest
import yaml

from ragengine_operator import constants as c
from ragengine_operator.manifests.inference import inference_network_policy
from ragengine_operator.manifests.labels import Owner, selector
from ragengine_operator.spec import RAGEngineSpec
from tests.node.conftest import pod_on_node, reach
from tests.operator.integration.kube import Kube, wait_for

PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}


@pytest.fixture(scope="module")
def stand_in(kube: Kube, namespace) -> tuple[str, str, Owner]:
    owner = Owner(namespace, "gpu-rag", str(uuid.uuid4()))
    spec = RAGEngineSpec.model_validate({"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"},
                                         "observability": {"metrics": {"scrapeFrom": [
                                             {"podSelector": {"matchLabels": PROMETHEUS}}]}}})
    policy = inference_network_policy(owner, spec)
    del policy["metadata"]["ownerReferences"]  # its owner does not exist here: the GC would delete it at once
    kube.kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=yaml.safe_dump(policy))
    pod = pod_on_node("vllm-stand-in", ["python", "-m", "http.server", str(c.VLLM_PORT), "--directory", "/tmp"],
                      labels=selector(owner, c.COMPONENT_INFERENCE))
    pod["spec"]["restartPolicy"] = "Always"
    pod["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    kube.core.create_namespaced_pod(namespace, pod)

    def address():
        p = kube.core.read_namespaced_pod("vllm-stand-in", namespace)
        ready = p.status.container_statuses and p.status.container_statuses[0].ready
        return ready and p.status.pod_ip
    ip = wait_for(address, 120, "the vLLM stand-in to run")
    wait_for(lambda: kube.kubectl("get", "networkpolicy", "-n", namespace, policy["metadata"]["name"],
                                  check=False).returncode == 0, 10, "the policy to be there")
    return namespace, f"http://{ip}:{c.VLLM_PORT}/", owner


def test_the_engines_pods_reach_vllm(kube, stand_in):
    namespace, url, owner = stand_in
    assert reach(kube, namespace, url, selector(owner, c.COMPONENT_ENGINE)) == [200, 200, 200]


def test_prometheus_reaches_vllm_when_monitoring_asks(kube, stand_in):
    namespace, url, _owner = stand_in
    assert reach(kube, namespace, url, PROMETHEUS) == [200, 200, 200]


def test_any_other_pod_is_refused(kube, stand_in):
    namespace, url, _owner = stand_in
    results = reach(kube, namespace, url, {"app": "curious"})
    assert all(isinstance(r, str) for r in results), f"a pod without the engine's labels reached vLLM: {results}"
