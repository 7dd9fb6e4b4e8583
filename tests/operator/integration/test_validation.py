"""The API server itself rejects invalid RAGEngines (structural schema + CEL), with clear messages."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes.client.rest import ApiException

from ..cases import GOOD_MODEL, INVALID


@pytest.fixture(scope="module")
def validation_ns(kube):
    name = f"v-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": name}})
    yield name
    kube.delete_all_ragengines(name, force=True)
    kube.core.delete_namespace(name)


def rejection(fn, status: int = 422) -> str:
    with pytest.raises(ApiException) as info:
        fn()
    assert info.value.status == status, info.value.body
    return json.loads(info.value.body)["message"]


@pytest.mark.parametrize(("case", "spec", "message", "_"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_manifest_rejected(kube, validation_ns, case, spec, message, _):
    text = rejection(lambda: kube.create_rag(validation_ns, f"bad-{case}"[:40], spec))
    assert message in text, text


@pytest.mark.parametrize("name", ["1starts-with-digit", "x" * 41])
def test_bad_names_rejected(kube, validation_ns, name):
    text = rejection(lambda: kube.create_rag(validation_ns, name, GOOD_MODEL))
    assert "DNS-1035" in text


def test_unknown_field_rejected_with_strict_validation(kube, validation_ns):
    text = rejection(lambda: kube.create_rag(validation_ns, "unknown", {**GOOD_MODEL, "replicaz": 3}, field_validation="Strict"),
                     status=400)
    assert 'unknown field "spec.replicaz"' in text


def test_defaults_applied_by_the_api_server(kube, validation_ns):
    rag = kube.create_rag(validation_ns, "defaults", GOOD_MODEL)
    spec = rag["spec"]
    assert spec["inference"]["gpus"] == 1 and spec["inference"]["modelCache"]["size"] == "100Gi"
    assert spec["retrieval"] == {"contextTokenRatio": 0.5, "similarityThreshold": 0.3, "noContext": "answer",
                                 "hybrid": True}
    assert spec["storage"]["volume"]["size"] == "20Gi" and spec["engine"]["replicas"] == 1


def test_immutable_and_non_shrinking_volumes(kube, validation_ns):
    kube.create_rag(validation_ns, "vols", {**GOOD_MODEL,
                                            "storage": {"volume": {"size": "10Gi", "storageClassName": "standard"}}})
    text = rejection(lambda: kube.patch_rag(validation_ns, "vols",
                                            {"spec": {"storage": {"volume": {"storageClassName": "fast"}}}}))
    assert "storageClassName is immutable" in text
    text = rejection(lambda: kube.patch_rag(validation_ns, "vols", {"spec": {"storage": {"volume": {"size": "5Gi"}}}}))
    assert "size can grow but never shrink" in text
    kube.patch_rag(validation_ns, "vols", {"spec": {"storage": {"volume": {"size": "20Gi"}}}})  # growing is fine


def test_model_cache_access_mode_is_immutable(kube, validation_ns):
    kube.create_rag(validation_ns, "mode", GOOD_MODEL)
    text = rejection(lambda: kube.patch_rag(validation_ns, "mode",
                                            {"spec": {"inference": {"modelCache": {"accessMode": "ReadWriteMany"}}}}))
    assert "modelCache.accessMode is immutable" in text


def test_names_that_would_collide_are_refused(kube, validation_ns):
    text = rejection(lambda: kube.create_rag(validation_ns, "docs-inference", GOOD_MODEL))
    assert "must not end in -inference" in text


def test_a_grow_can_be_reverted_down_to_the_volumes_size(kube, validation_ns):
    from ragengine_operator import constants as c

    kube.create_rag(validation_ns, "revert", {**GOOD_MODEL, "storage": {"volume": {"size": "10Gi"}}})
    # what the operator records after it saw the PVC (here written directly: no operator serves this namespace)
    kube.custom.patch_namespaced_custom_object_status(c.GROUP, c.VERSION, validation_ns, c.PLURAL, "revert",
                                                      {"status": {"dataVolumeSize": "10Gi"}})
    kube.patch_rag(validation_ns, "revert", {"spec": {"storage": {"volume": {"size": "20Gi"}}}})  # a grow the class may refuse
    kube.patch_rag(validation_ns, "revert", {"spec": {"storage": {"volume": {"size": "10Gi"}}}})  # back to the volume's size: ok
    text = rejection(lambda: kube.patch_rag(validation_ns, "revert", {"spec": {"storage": {"volume": {"size": "5Gi"}}}}))
    assert "never shrink below the volume's current size" in text
