"""RAGEngine conversion between v1alpha1 and v1beta1 (operator/ragengine_operator/conversion/convert.py).

Lossless both ways, property-tested over objects generated from the CRD's own schemas (the committed
crds/ file: what the API server validates), plus the previous release's examples and the webhook's
answers to good and bad reviews.
"""

from __future__ import annotations

import copy
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from ragengine_operator.conversion.convert import (
    KEPT_ANNOTATION,
    V1ALPHA1,
    V1BETA1,
    ConversionError,
    convert,
    to_v1alpha1,
    to_v1beta1,
)
from ragengine_operator.conversion.server import review_response
from ragengine_operator.spec import RAGEngineSpec
from tests.support.previous_release import commit
from tests.support.schema_strategies import from_structural

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "ragengine.io_ragengines.yaml"


@cache
def spec_schema(version: str) -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]["properties"]["spec"]  # type: ignore[no-any-return]


def checked_schema(node: Any) -> Any:
    """The structural schema as JSON Schema for validation: no unknown fields (the API server prunes them),
    int-or-string as either; CEL rules left out (not JSON Schema)."""
    if not isinstance(node, dict):
        return node
    if node.get("x-kubernetes-int-or-string"):
        return {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 4096},
                          {"type": "string", "pattern": "^[1-9][0-9]{0,2}(Mi|Gi)$"}]}
    if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
        return {"type": "object"}
    out = {k: checked_schema(v) for k, v in node.items()
           if not k.startswith("x-kubernetes") and k not in ("default", "description")}
    if "properties" in out:
        out["properties"] = {k: checked_schema(v) for k, v in node["properties"].items()}
        out["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        out["items"] = checked_schema(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = checked_schema(node["additionalProperties"])
    return out


@cache
def validator(version: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(checked_schema(spec_schema(version)))


def v1alpha1_rules_hold(spec: dict[str, Any]) -> bool:
    """The v1alpha1 CEL rules the generator cannot see and the converters rely on: embedding's model / url /
    apiKeySecretRef combinations, and one kind per source."""
    embedding = spec.get("embedding", {})
    if ("model" in embedding and "url" in embedding) or ("apiKeySecretRef" in embedding and "url" not in embedding):
        return False
    return all(sum(k in s for k in ("configMap", "git", "http")) == 1 for s in spec.get("sources", []))


def defaulted(value: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting as the API server applies it (absent fields with a default get it, recursively)."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for key, sub in schema["properties"].items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = defaulted(out[key], sub)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [defaulted(v, schema["items"]) for v in value]
    return value


def obj(api_version: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "kb", "namespace": "team", "uid": "0f1e", "resourceVersion": "7", "generation": 3}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": api_version, "kind": "RAGEngine", "metadata": meta, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                       "lastTransitionTime": "2026-11-28T10:00:00Z"}], "model": "m"}}


# Shrinking a whole RAGEngine takes minutes: a failure prints the object as generated instead.
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, print_blob=True, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@SETTINGS
@given(from_structural(spec_schema("v1beta1")))
def test_every_v1beta1_object_survives_a_trip_through_v1alpha1(spec):
    b = obj(V1BETA1, defaulted(spec, spec_schema("v1beta1")))
    a = to_v1alpha1(b)
    assert a["apiVersion"] == V1ALPHA1 and a["status"] == b["status"]
    # what v1alpha1 shows is a v1alpha1 object its schema admits (pruning would change nothing)
    validator("v1alpha1").validate(a["spec"])
    back = to_v1beta1(a)
    assert {**back, "spec": defaulted(back["spec"], spec_schema("v1beta1"))} == b  # as served, defaults applied
    assert convert(convert(b, V1ALPHA1), V1BETA1) == back


@SETTINGS
@given(from_structural(spec_schema("v1alpha1")))
def test_every_v1alpha1_object_survives_a_trip_through_v1beta1(spec):
    assume(v1alpha1_rules_hold(spec))
    a = obj(V1ALPHA1, defaulted(spec, spec_schema("v1alpha1")))
    b = to_v1beta1(a)
    validator("v1beta1").validate(b["spec"])
    back = to_v1alpha1(b)
    assert KEPT_ANNOTATION not in back["metadata"].get("annotations", {})  # v1beta1 holds all of v1alpha1
    assert defaulted(back["spec"], spec_schema("v1alpha1")) == a["spec"]
    assert {k: v for k, v in back.items() if k != "spec"} == {k: v for k, v in a.items() if k != "spec"}


def previous_release_objects() -> list[tuple[str, dict[str, Any]]]:
    """Every RAGEngine the previous release shipped as an example (read from git, as that release had them)."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", commit(), "examples/"],
                           capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in names:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit()}:{name}"],
                              capture_output=True, text=True, check=True).stdout
        found += [(Path(name).name, d) for d in yaml.safe_load_all(text) if d and d.get("kind") == "RAGEngine"]
    assert len(found) >= 7, found
    return found


@pytest.mark.parametrize(("name", "manifest"), previous_release_objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_previous_release_s_examples_become_valid_v1beta1_and_come_back_unchanged(name, manifest):
    assert manifest["apiVersion"] == V1ALPHA1
    a = {**manifest, "spec": defaulted(manifest["spec"], spec_schema("v1alpha1"))}
    b = to_v1beta1(a)
    RAGEngineSpec.model_validate(b["spec"])  # the operator reads it
    assert to_v1alpha1(b) == a


def test_the_regrouped_fields_land_where_v1beta1_keeps_them():
    a = obj(V1ALPHA1, {
        "embedding": {"url": "http://embed/v1", "apiKeySecretRef": {"name": "e", "key": "k"}},
        "monitoring": {"interval": "15s"}, "observability": {"tracing": {"endpoint": "http://otel:4317"}},
        "vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}},
        "sessions": {"databaseSecretRef": {"name": "db"}}, "storage": {"size": "5Gi"}})
    assert to_v1beta1(a)["spec"] == {
        "embedding": {"remote": {"url": "http://embed/v1", "apiKeySecretRef": {"name": "e", "key": "k"}}},
        "observability": {"tracing": {"endpoint": "http://otel:4317"}, "metrics": {"interval": "15s"}},
        "storage": {"volume": {"size": "5Gi"}, "vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}},
                    "sessions": {"databaseSecretRef": {"name": "db"}}}}
    assert to_v1beta1(obj(V1ALPHA1, {"embedding": {"model": "wordllama:l2_supercat"}}))["spec"] == {
        "embedding": {"local": {"model": "wordllama:l2_supercat"}}}


S3_SOURCE = {"name": "bucket", "index": "kb", "s3": {"bucket": "docs"}}  # a kind v1alpha1 lacks
GIT_SOURCE = {"name": "wiki", "index": "kb", "git": {"url": "https://git.example/wiki.git"}}


def test_what_v1alpha1_cannot_show_is_kept_in_an_annotation_and_put_back():
    b = obj(V1BETA1, {"evaluation": {"schedule": "@daily"}, "sources": [GIT_SOURCE, S3_SOURCE],
                      "storage": {"volume": {"size": "5Gi"}}})
    a = to_v1alpha1(b)
    assert a["spec"] == {"sources": [GIT_SOURCE], "storage": {"size": "5Gi"}}
    kept = json.loads(a["metadata"]["annotations"][KEPT_ANNOTATION])
    assert {tuple(f["path"]) for f in kept["fields"]} == {("evaluation",), ("sources",)}
    assert to_v1beta1(a) == b


def test_an_edit_through_v1alpha1_wins_over_the_kept_value_at_its_place():
    b = obj(V1BETA1, {"evaluation": {"schedule": "@daily"}, "sources": [GIT_SOURCE, S3_SOURCE]})
    a = to_v1alpha1(b)
    a["spec"]["sources"] = [{**GIT_SOURCE, "index": "handbook"}]  # a client edits the list it sees
    back = to_v1beta1(a)
    assert back["spec"]["sources"] == [{**GIT_SOURCE, "index": "handbook"}]  # the edit, not the kept list
    assert back["spec"]["evaluation"] == {"schedule": "@daily"}  # untouched places get their value back
    assert KEPT_ANNOTATION not in back["metadata"].get("annotations", {})


@pytest.mark.parametrize("annotation", ["not json", '{"version": 2, "fields": []}', '{"version": 1, "fields": [{"path": []}]}'])
def test_a_corrupt_annotation_is_a_clear_refusal_not_a_guess(annotation):
    a = obj(V1ALPHA1, {}, {KEPT_ANNOTATION: annotation})
    with pytest.raises(ConversionError, match=f"annotation {KEPT_ANNOTATION} is not what this operator wrote"):
        to_v1beta1(a)
    answer = review_response({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {
        "uid": "u1", "desiredAPIVersion": V1BETA1, "objects": [obj(V1ALPHA1, {}), a]}})["response"]
    assert answer["uid"] == "u1" and answer["convertedObjects"] == []  # all or nothing
    assert answer["result"]["status"] == "Failure" and KEPT_ANNOTATION in answer["result"]["message"]


def test_the_webhook_converts_a_whole_batch_and_keeps_metadata_and_status():
    objects = [obj(V1ALPHA1, {"storage": {"size": f"{n}Gi"}}) for n in (1, 2, 3)]
    answer = review_response({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {
        "uid": "u2", "desiredAPIVersion": V1BETA1, "objects": objects}})
    assert answer["kind"] == "ConversionReview" and answer["response"]["result"] == {"status": "Success"}
    got = answer["response"]["convertedObjects"]
    assert [o["spec"]["storage"]["volume"]["size"] for o in got] == ["1Gi", "2Gi", "3Gi"]
    assert all(o["metadata"] == objects[0]["metadata"] and o["status"] == objects[0]["status"] for o in got)


@pytest.mark.parametrize("review", [{}, {"request": {"uid": "u"}}, {"request": {"uid": "u", "desiredAPIVersion": V1BETA1,
                                                                                "objects": "x"}},
                                    {"request": {"uid": "u", "desiredAPIVersion": "ragengine.io/v2",
                                                 "objects": [obj(V1ALPHA1, {})]}}])
def test_a_malformed_review_is_a_failure_with_a_message(review):
    result = review_response(review)["response"]["result"]
    assert result["status"] == "Failure" and result["message"]


@given(st.sampled_from([V1ALPHA1, V1BETA1]))
def test_converting_to_the_same_version_changes_nothing(version):
    o = obj(version, {"storage": {"size": "1Gi"}} if version == V1ALPHA1 else {"storage": {"volume": {"size": "1Gi"}}})
    assert convert(o, version) == o and convert(o, version) is not o


def test_an_empty_embedding_model_of_v1alpha1_is_one_v1beta1_holds():
    """v1alpha1 admits embedding.model: "" (the engine's default model); v1beta1 must hold it too, or that
    manifest would never convert (found by Hypothesis's saved example)."""
    a = obj(V1ALPHA1, {"embedding": {"model": ""}})
    b = to_v1beta1(a)
    assert RAGEngineSpec.model_validate(b["spec"]).embedding.model == ""
    validator("v1beta1").validate(b["spec"])
    assert to_v1alpha1(b) == a
