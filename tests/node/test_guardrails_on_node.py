"""Issue 26 on the real node: a policy ConfigMap edit reaches the running engine without a restart.

The operator mounts the ConfigMap as a directory; the kubelet swaps its files when the ConfigMap changes (at
the pod's next sync: a minute at the kubelet's default, 10 s on the local node, hack/node.sh), and the engine
re-reads the policy when the file changes. The same pod, same container, no restart: redaction becomes
blocking, and a broken edit keeps the last good policy while the RAGEngine says so (GuardrailsPolicy, Degraded).
"""

from __future__ import annotations

import httpx
import pytest

from tests.node.conftest import ON_NODE, engine_pods, service_base, wait_condition, wait_service_ready
from tests.operator.integration.kube import Kube, wait_for

NAME = "guarded"
KEY = "e2e-guardrails-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
ANSWER = "The door code is ZX-4417-QQ, keep it safe."
REDACT = "scanners:\n  - type: regex\n    action: redact\n    patterns: ['ZX-[0-9]{4}-[A-Z]{2}']\n"
BLOCK = "blockMessage: Not shared here.\nscanners:\n  - type: regex\n    action: block\n    patterns: ['ZX-[0-9]{4}-[A-Z]{2}']\n"
KUBELET_SYNC = 150  # the kubelet's ConfigMap volume refresh (syncFrequency; 1 m on a default kubelet) with room


def _policy(kube: Kube, ns: str, text: str) -> None:
    kube.kubectl("apply", "-n", ns, "-f", "-", input="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: door-policy}\n"
                 "data:\n  guardrails.yaml: |\n" + "".join(f"    {line}\n" for line in text.splitlines()))


@pytest.fixture(scope="module")
def guarded(kube: Kube, chart_operator, namespace, llm) -> str:
    fake, server = llm
    fake.reply, fake.split = ANSWER, lambda text: [text]  # verbatim (not re-spaced word by word)
    _policy(kube, namespace, REDACT)
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "guarded-key"}, "stringData": {"key": KEY}})
    kube.create_rag(namespace, NAME, {
        "inference": {"url": f"{server.base}/v1", "servedModelName": "fake-llm"},
        "engine": {**ON_NODE, "networkPolicy": {"allowFrom": [{"podSelector": {}}]}},
        "storage": {"volume": {"storageClassName": "ragengine-local", "size": "1Gi"}},
        "auth": {"apiKeySecretRef": {"name": "guarded-key", "key": "key"}},
        "guardrails": {"enabled": True, "configMapRef": {"name": "door-policy"}},
    })
    wait_condition(kube, namespace, NAME, "Ready", "True", 180)
    wait_service_ready(kube, namespace, NAME, AUTH)
    return namespace


def _ask(base: str) -> dict:
    resp = httpx.post(f"{base}/v1/chat/completions", headers=AUTH, timeout=60,
                      json={"messages": [{"role": "user", "content": "What is the door code?"}]})
    assert resp.status_code == 200, resp.text
    return resp.json()


def _container(kube: Kube, ns: str) -> tuple[str, int]:
    (pod,) = engine_pods(kube, ns, NAME)
    return pod.metadata.uid, pod.status.container_statuses[0].restart_count


def test_a_configmap_edit_changes_the_running_engines_policy_without_a_restart(kube, guarded):
    ns, base = guarded, service_base(kube, guarded, NAME)
    out = _ask(base)
    assert "ZX-4417-QQ" not in out["choices"][0]["message"]["content"] and out["guardrails"]["action"] == "redact"
    assert wait_condition(kube, ns, NAME, "GuardrailsPolicy", "True", 60)["reason"] == "PolicyLoaded"
    before = _container(kube, ns)

    _policy(kube, ns, BLOCK)
    out = wait_for(lambda: (o := _ask(base))["guardrails"]["action"] == "block" and o, KUBELET_SYNC,
                   "the edited policy (block) in force in the running engine", interval=2)
    assert out["choices"][0]["message"]["content"] == "Not shared here."
    assert _container(kube, ns) == before  # the same pod, its container never restarted

    _policy(kube, ns, "scanners: [ - broken\n")
    cond = wait_condition(kube, ns, NAME, "GuardrailsPolicy", "False", 60)
    assert cond["reason"] == "PolicyInvalid"
    assert kube.condition(ns, NAME, "Degraded")["reason"] == "GuardrailsPolicyInvalid"
    # the engine refuses the broken file once the kubelet delivers it (its metric says so) and keeps blocking
    wait_for(lambda: "ragengine_guardrails_policy_error 1.0" in httpx.get(f"{base}/metrics", headers=AUTH, timeout=10).text,
             KUBELET_SYNC, "the engine's metric reporting the refused policy", interval=2)
    assert _ask(base)["guardrails"]["action"] == "block"
    assert _container(kube, ns) == before
