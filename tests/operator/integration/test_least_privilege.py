"""Least privilege on the real control plane (issue 22, finding 10): with exact watchNamespaces the operator
runs on Roles in those namespaces only; its Secret writes are narrowed by the chart's admission policy;
the chart's aggregated roles give edit/admin holders RAGEngines and view holders a read of them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from ragengine_operator import constants as c

from .conftest import CHART, OPERATOR_ENV, OPERATOR_NAMESPACE, ROOT, service_account_kubeconfig
from .kube import wait_for


def render(bin_dir: Path, release: str, *args: str) -> list[dict]:
    out = subprocess.run([str(bin_dir / "helm"), "template", release, str(CHART), "-n", OPERATOR_NAMESPACE, *args],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def client(kubeconfig: Path) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))


def status_of(call) -> int:
    try:
        call()
    except ApiException as exc:
        return exc.status
    return 200


def test_roles_in_the_watched_namespace_are_all_the_operator_needs(kube, bin_dir, bare_namespace, source_engine,
                                                                     tmp_path):
    """The chart rendered with watchNamespaces=[ns]: a Role and RoleBinding there, no ClusterRole bound. An
    operator with only that (its own ServiceAccount) reconciles a RAGEngine to Ready and syncs its source,
    without a permission warning, and can read nothing in any other namespace."""
    ns = bare_namespace
    release = f"np{uuid.uuid4().hex[:6]}"
    sa = f"{release}-operator"
    docs = render(bin_dir, release, "--set", f"watchNamespaces={{{ns}}}", "--set", f"serviceAccount.name={sa}",
                  "--set", "rbac.aggregateToDefaultRoles=false", "--set", "rbac.tokenReview=false",
                  "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
                  "--show-only", "templates/deployment.yaml")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    rbac = [d for d in docs if d["kind"] != "Deployment"]
    assert sorted(d["kind"] for d in rbac) == ["Role", "RoleBinding", "ServiceAccount"]
    assert {d["metadata"].get("namespace") for d in rbac if d["kind"] != "ServiceAccount"} == {ns}
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RAGENGINE_OPERATOR_SCAN_CLUSTER"] == "false"
    kube.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(rbac))
    kubeconfig = service_account_kubeconfig(kube, sa, tmp_path / "namespaced.kubeconfig")
    core = client(kubeconfig)
    assert status_of(lambda: core.list_namespaced_pod(ns)) == 200
    for elsewhere in (OPERATOR_NAMESPACE, "default", "kube-system"):
        assert status_of(lambda e=elsewhere: core.list_namespaced_pod(e)) == 403
        assert status_of(lambda e=elsewhere: core.read_namespaced_secret("anything", e)) == 403
    assert status_of(lambda: core.list_namespace()) == 403  # nothing cluster-wide

    log = tmp_path / "operator.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", ns],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=ROOT,
        env={**os.environ, **OPERATOR_ENV, "KUBECONFIG": str(kubeconfig), "RAGENGINE_OPERATOR_SCAN_CLUSTER": "false",
             "RAGENGINE_OPERATOR_METRICS_PORT": "0", "RAGENGINE_OPERATOR_LIVENESS_PORT": "0",
             "RAGENGINE_OPERATOR_SYNC_MODE": "subprocess", "RAGENGINE_OPERATOR_ENGINE_URL": source_engine})
    try:
        kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "notes"}, "data": {"a.md": "# A\n\nAlpha.\n"}})
        kube.create_rag(ns, "scoped", {"inference": {"model": "m"}, "storage": {"volume": {"size": "1Gi"}},
                                       "sources": [{"name": "notes", "index": f"notes-{ns}", "configMap": {"name": "notes"}}]})
        kube.wait_ready(ns, "scoped", timeout=90)  # every child applied, generated keys included
        wait_for(lambda: (x := kube.condition(ns, "scoped", "SourcesSynced")) and x["status"] == "True", 60,
                 "the source synced")
        assert kube.core.read_namespaced_secret("scoped-api-key", ns).metadata.labels[c.LABEL_MANAGED_BY] == c.FIELD_MANAGER
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        kube.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(rbac), check=False)
    text = log.read_text()
    assert "Not enough permissions" not in text and "Forbidden" not in text and "Traceback" not in text, text[-3000:]


def test_the_admission_policy_narrows_the_operators_secret_writes(kube, operator_identity, bare_namespace):
    """RBAC grants the operator create/patch on every Secret (it cannot be narrowed by name or label for
    create); the chart's ValidatingAdmissionPolicy lets its ServiceAccount write only the labelled
    <name>-api-key Secrets it generates (conftest applies the policy: every operator in these tests ran
    under it)."""
    ns = bare_namespace
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "prod-db"}, "stringData": {"password": "p"}})
    core = client(operator_identity)
    theirs = {"metadata": {"name": "prod-db"}, "stringData": {"password": "mine now"}}

    def denied() -> str | None:
        try:
            core.patch_namespaced_secret("prod-db", ns, theirs)
        except ApiException as exc:
            return exc.body if exc.status in (403, 422) and "RAGEngine operator" in (exc.body or "") else None
        raise AssertionError("the operator's ServiceAccount changed a tenant's Secret")

    assert "writes only the Secrets it generates" in wait_for(denied, 30, "the policy in force")
    # a tenant's Secret named like a key: labelling it on the way in does not make it the operator's
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "team-api-key"}, "stringData": {"api-key": "t"}})
    relabel = {"metadata": {"labels": {c.LABEL_MANAGED_BY: c.FIELD_MANAGER}}, "stringData": {"api-key": "mine"}}
    try:
        core.patch_namespaced_secret("team-api-key", ns, relabel)
        raise AssertionError("the operator's ServiceAccount took over a tenant's Secret")
    except ApiException as exc:
        assert exc.status in (403, 422) and "changes no Secret it did not create" in exc.body, exc.body
    stray = {"metadata": {"name": "stray"}, "stringData": {"k": "v"}}
    assert status_of(lambda: core.create_namespaced_secret(ns, stray)) in (403, 422)
    unlabelled = {"metadata": {"name": "x-api-key"}, "stringData": {"api-key": "v"}}
    assert status_of(lambda: core.create_namespaced_secret(ns, unlabelled)) in (403, 422)
    ours = {"metadata": {"name": "x-api-key", "labels": {c.LABEL_MANAGED_BY: c.FIELD_MANAGER}},
            "stringData": {"api-key": "v"}}
    assert status_of(lambda: core.create_namespaced_secret(ns, ours)) == 200
    assert kube.core.read_namespaced_secret("prod-db", ns).data["password"] == "cA=="  # untouched


@pytest.mark.parametrize("role, can_create", [("edit", True), ("admin", True), ("view", False)])
def test_the_built_in_roles_carry_ragengines(kube, bare_namespace, tmp_path, role, can_create):
    """The chart's aggregated ClusterRoles (applied by conftest with the RBAC): a user bound to the built-in
    edit or admin role in a namespace may create RAGEngines there, one bound to view may only read them."""
    ns = bare_namespace
    user = f"tenant-{role}"
    kube.core.create_namespaced_service_account(ns, {"metadata": {"name": user}})
    kube.kubectl("create", "rolebinding", user, "-n", ns, f"--clusterrole={role}", f"--serviceaccount={ns}:{user}")
    token = kube.kubectl("create", "token", user, "-n", ns, "--duration=1h").stdout.strip()
    admin = yaml.safe_load((ROOT / ".cluster" / "kubeconfig").read_text())
    cluster = admin["clusters"][0]
    path = tmp_path / "tenant.kubeconfig"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
                                    "users": [{"name": user, "user": {"token": token}}],
                                    "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
                                    "current-context": user}))
    custom = k8s.CustomObjectsApi(k8s_config.new_client_from_config(config_file=str(path)))
    body = {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": "mine"}, "spec": {}}

    # the aggregation controller fills the built-in roles asynchronously: wait for the read first
    wait_for(lambda: status_of(lambda: custom.list_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL)) == 200,
             30, f"{role} may read RAGEngines")
    created = status_of(lambda: custom.create_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, body))
    assert created == (200 if can_create else 403)
    assert status_of(lambda: custom.list_namespaced_custom_object(c.GROUP, c.VERSION, "default", c.PLURAL)) == 403
