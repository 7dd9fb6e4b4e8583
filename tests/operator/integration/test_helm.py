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
    # exact namespaces: a Role in each, and one in the release's namespace for the operator's own objects (the
    # Lease, the webhook's certificate); nothing cluster-wide but the aggregated edit/view roles (no binding),
    roles = sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "Role")
    assert roles == ["ragengine-system", "team-a", "team-b"]
    (own,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["namespace"] == "ragengine-system"]
    assert {(r["resources"][0], tuple(r.get("resourceNames", ()))) for r in own["rules"]} == {
        ("leases", ()), ("leases", ("rag-ragengine",)), ("secrets", ()), ("secrets", ("rag-ragengine-webhook-tls",)),
        ("pods", ())}
    # the TokenReview bindings of spec.access.serviceAccounts (rbac.tokenReview), whose role can bind
    # system:auth-delegator and nothing else, and the CRD's own (its conversion stanza, the storage-version
    # migration: docs/upgrades.md)
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding") == [
        "rag-ragengine-crd", "rag-ragengine-tokenreview"]
    (crd_role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "rag-ragengine-crd"]
    assert crd_role["rules"][:2] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "resourceNames": ["ragengines.ragengine.io"], "verbs": ["get", "patch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions/status"],
         "resourceNames": ["ragengines.ragengine.io"], "verbs": ["patch"]}]
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
    # two replicas, a new one in before an old one goes: the webhook never goes away; one leads (docs/upgrades.md)
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert dep["spec"]["template"]["metadata"]["labels"]["ragengine.io/leader-election"] == "true"
    ctr = dep["spec"]["template"]["spec"]["containers"][0]
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz" and ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1
    (webhook,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "rag-ragengine-webhook"]
    assert webhook["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook"}]
    assert ctr["args"] == ["--namespace=team-a", "--namespace=team-b"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["RAGENGINE_OPERATOR_SCAN_CLUSTER"] == "false" and env["RAGENGINE_OPERATOR_SYNC_MODE"] == "job"
    assert env["RAGENGINE_OPERATOR_LEADER_ELECTION"] == "true" and env["RAGENGINE_OPERATOR_LEASE_NAME"] == "rag-ragengine"
    assert env["RAGENGINE_OPERATOR_WEBHOOK_SERVICE"] == "rag-ragengine-webhook"  # this release owns the CRD's stanza
    assert env["RAGENGINE_OPERATOR_LEGACY_POD_SELECTOR"] == (
        "app.kubernetes.io/name=ragengine-operator,app.kubernetes.io/instance=rag,!ragengine.io/leader-election")
    # the sync Jobs run the sync image (git, the parsers), not the operator's
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert env["RAGENGINE_OPERATOR_SYNC_IMAGE"] == values["sync"]["image"] != ctr["image"]
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # the CRD as a whole (a replace: the test cluster's names its webhook by URL, the chart's by Service, and an
    # apply would merge the two), the rest as the chart applies it
    assert "(server dry run)" in kube.kubectl("replace", "--dry-run=server", "-f", "-", input=yaml.safe_dump(crd)).stdout
    rest = yaml.safe_dump_all([d for d in docs if d["kind"] != "CustomResourceDefinition"])
    out = kube.kubectl("apply", "--dry-run=server", "-f", "-", input=rest)
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
    assert {"ClusterRole", "ClusterRoleBinding"} <= {d["kind"] for d in docs}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Role"] == ["rag-ragengine-self"]  # its own namespace
    # without the CRD subchart (CRD managed elsewhere): nor the CRD's conversion stanza, nor its migration
    rendered = helm(bin_dir, "template", "rag", str(CHART), "-n", "ragengine-system", "--set", "crds.install=false")
    assert "CustomResourceDefinition" not in rendered and "RAGENGINE_OPERATOR_WEBHOOK_SERVICE" not in rendered
    assert "rag-ragengine-crd" not in rendered
    # cert-manager makes the webhook's certificate (a self-signed Issuer of the release, or the one named)
    docs = [d for d in yaml.safe_load_all(helm(bin_dir, "template", "rag", str(CHART), "-n", "ragengine-system",
                                                "--set", "conversionWebhook.certManager.enabled=true")) if d]
    (cert,) = [d for d in docs if d["kind"] == "Certificate"]
    assert cert["spec"]["secretName"] == "rag-ragengine-webhook-tls"
    assert "rag-ragengine-webhook.ragengine-system.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"] == {"name": "rag-ragengine-webhook", "kind": "Issuer"}
    assert [d["spec"] for d in docs if d["kind"] == "Issuer"] == [{"selfSigned": {}}]
    env = {e["name"]: e.get("value") for e in next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
           ["spec"]["containers"][0]["env"]}
    assert env["RAGENGINE_OPERATOR_WEBHOOK_CERT_MANAGER"] == "true"
    docs = [d for d in yaml.safe_load_all(helm(bin_dir, "template", "rag", str(CHART), "-n", "ragengine-system",
                                                "--set", "conversionWebhook.certManager.enabled=true",
                                                "--set", "conversionWebhook.certManager.issuerRef.name=corp-ca",
                                                "--set", "conversionWebhook.certManager.issuerRef.kind=ClusterIssuer")) if d]
    assert "Issuer" not in {d["kind"] for d in docs}
    issuer = next(d for d in docs if d["kind"] == "Certificate")["spec"]["issuerRef"]
    assert issuer == {"name": "corp-ca", "kind": "ClusterIssuer"}


def test_values_schema_rejects_bad_values(bin_dir):
    proc = subprocess.run([str(bin_dir / "helm"), "template", "rag", str(CHART), "--set", "maxWorkers=0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "maxWorkers" in proc.stderr
    # an empty sync image (the default of releases whose Jobs ran the operator's image) would render Jobs without one
    proc = subprocess.run([str(bin_dir / "helm"), "template", "rag", str(CHART), "--set", "sync.image="],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "/sync/image" in proc.stderr, proc.stderr


def test_the_sync_image_is_a_value_of_its_own(bin_dir):
    docs = yaml.safe_load_all(helm(bin_dir, "template", "rag", str(CHART), "--set", "sync.image=registry.local/sync:7",
                                   "--set-string", "image.tag=9", "--show-only", "templates/deployment.yaml"))
    ctr = next(d for d in docs if d)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["RAGENGINE_OPERATOR_SYNC_IMAGE"] == "registry.local/sync:7" and ctr["image"].endswith(":9")
