"""The chart lints and its rendered manifests pass the real API server's validation (dry run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "ragengine"


def helm(bin_dir: Path, *args: str) -> str:
    proc = subprocess.run([str(bin_dir / "helm"), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def test_helm_lint(bin_dir):
    out = helm(bin_dir, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out


def test_helm_template_applies_server_side_dry_run(kube, bin_dir):
    for ns in ("ragengine-system", "team-a", "team-b"):
        kube.kubectl("create", "namespace", ns, check=False)
    rendered = helm(bin_dir, "template", "rag", str(CHART), "-n", "ragengine-system",
                    "--set", "watchNamespaces={team-a,team-b}")
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = {d["kind"] for d in docs}
    assert kinds >= {"CustomResourceDefinition", "Deployment", "ServiceAccount", "Role", "RoleBinding",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    # exact namespaces: a Role in each, nothing cluster-wide but the aggregated edit/view roles (no binding)
    assert sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "Role") == ["team-a", "team-b"]
    # cluster-wide: only the TokenReview bindings of spec.access.serviceAccounts (rbac.tokenReview), and
    # that role can bind system:auth-delegator and nothing else
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"] == ["rag-ragengine-tokenreview"]
    (review,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "rag-ragengine-tokenreview"]
    assert review["rules"] == [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"],
         "verbs": ["get", "list", "create", "patch", "delete"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"],
         "resourceNames": ["system:auth-delegator"]}]
    aggregated = {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d["kind"] == "ClusterRole"}
    assert aggregated["rag-ragengine-edit"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert aggregated["rag-ragengine-view"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    ctr = dep["spec"]["template"]["spec"]["containers"][0]
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ctr["args"] == ["--namespace=team-a", "--namespace=team-b"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["RAGENGINE_OPERATOR_SCAN_CLUSTER"] == "false" and env["RAGENGINE_OPERATOR_SYNC_MODE"] == "job"
    assert env["RAGENGINE_OPERATOR_SYNC_IMAGE"] == ctr["image"]  # the sync Jobs run the operator's own image
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    out = kube.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert "(server dry run)" in out.stdout
    # the operator's own NetworkPolicy (opt-in): DNS and the API server out, metrics in
    rendered = helm(bin_dir, "template", "rag", str(CHART), "-n", "ragengine-system", "--set", "networkPolicy.enabled=true",
                    "--set", "networkPolicy.apiServer[0].cidr=127.0.0.1/32", "--set", "networkPolicy.apiServer[0].port=6443",
                    "--show-only", "templates/networkpolicy.yaml")
    (policy,) = [d for d in yaml.safe_load_all(rendered) if d]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"][1] == {"to": [{"ipBlock": {"cidr": "127.0.0.1/32"}}],
                                           "ports": [{"port": 6443, "protocol": "TCP"}]}
    assert "(server dry run)" in kube.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered).stdout
    # a glob: the namespaces are not known in advance, so a ClusterRole (and cluster scanning)
    docs = [d for d in yaml.safe_load_all(helm(bin_dir, "template", "rag", str(CHART), "-n", "ragengine-system",
                                                "--set", "watchNamespaces={team-*}")) if d]
    assert {"ClusterRole", "ClusterRoleBinding"} <= {d["kind"] for d in docs} and "Role" not in {d["kind"] for d in docs}
    # without the CRD subchart (CRD managed elsewhere)
    rendered = helm(bin_dir, "template", "rag", str(CHART), "-n", "ragengine-system", "--set", "crds.install=false")
    assert "CustomResourceDefinition" not in rendered


def test_values_schema_rejects_bad_values(bin_dir):
    proc = subprocess.run([str(bin_dir / "helm"), "template", "rag", str(CHART), "--set", "maxWorkers=0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "maxWorkers" in proc.stderr
