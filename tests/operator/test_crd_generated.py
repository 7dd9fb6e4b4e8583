"""The committed CRD (and its chart copy) is exactly what spec.py + hack/crd-overlay.yaml generate."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_crd_matches_spec_py():
    proc = subprocess.run([sys.executable, "hack/gen_crds.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"CRD drifted from spec.py; run `python hack/gen_crds.py`:\n{proc.stdout[-4000:]}"


def walk(node, path="root"):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")


def test_crd_is_structural_and_complete():
    crd = yaml.safe_load((ROOT / "crds" / "ragengine.io_ragengines.yaml").read_text())
    beta, alpha = crd["spec"]["versions"]
    assert (beta["name"], beta["served"], beta["storage"]) == ("v1beta1", True, True)
    assert (alpha["name"], alpha["served"], alpha["storage"], alpha["deprecated"]) == ("v1alpha1", True, False, True)
    assert "use ragengine.io/v1beta1" in alpha["deprecationWarning"]
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"] == "/convert"
    for version in (beta, alpha):
        assert version["subresources"]["status"] == {}
        assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.inference.replicas"
        assert [col["name"] for col in version["additionalPrinterColumns"]][:3] == ["Ready", "Model", "Endpoint"]
    assert crd["spec"]["names"]["shortNames"] == ["rag"]
    schema = beta["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert "anyOf" not in node and "$ref" not in node and "title" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        if "properties" in node:
            assert "additionalProperties" not in node, path
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    rules = {r["message"] for _, n in walk(schema) for r in n.get("x-kubernetes-validations", [])}
    assert "exactly one of inference.model or inference.url must be set" in rules
    # the status is the operator's, the same in both versions: v1alpha1's frozen one is part of v1beta1's (its
    # descriptions may say more: a source type v1beta1 added)
    assert within(alpha["schema"]["openAPIV3Schema"]["properties"]["status"], schema["properties"]["status"])


def within(small, large) -> bool:
    """Every key and value of ``small`` in ``large`` (which may have more), descriptions aside."""
    if isinstance(small, dict) and isinstance(large, dict):
        return all(k in large and within(v, large[k]) for k, v in small.items() if k != "description")
    return bool(small == large)


def test_the_chart_copy_names_its_release_s_webhook_service():
    text = next(ROOT.glob("charts/ragengine/charts/ragengine-crds/templates/*.yaml")).read_text()
    assert "namespace: {{ .Release.Namespace }}" in text and 'name: {{ include "ragengine.webhookService" . }}' in text
    chart = yaml.safe_load(text.replace("{{ .Release.Namespace }}", "rel-ns")
                           .replace('{{ include "ragengine.webhookService" . }}', "rel-webhook"))
    crd = yaml.safe_load((ROOT / "crds" / "ragengine.io_ragengines.yaml").read_text())
    assert chart["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert chart["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "namespace": "rel-ns", "name": "rel-webhook", "path": "/convert", "port": 443}
    chart["spec"]["conversion"] = crd["spec"]["conversion"]
    assert chart["spec"] == crd["spec"]
