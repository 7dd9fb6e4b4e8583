"""The CRD's schema and CEL rules, fuzzed against the real API server (issue 15, item 3).

Seeded random specs mix valid and invalid values for every field family. Each is created with
`dryRun=All` (the API server runs defaulting, the structural schema and every CEL rule, and stores
nothing). Properties:
- a rejected spec gets a 4xx whose causes name what is wrong: each cause's field is a path into the
  submitted spec, and a CEL rule's refusal carries that rule's message from the CRD;
- an accepted spec, as the API server defaulted it, parses with the operator's own model (so the
  operator never reports InvalidSpec for something the API server let in), plans without an
  exception, and the planned Deployments, PVCs and Services pass the API server's dry run too.
Bounded: at most FUZZ_SPECS specs or FUZZ_SECONDS seconds. RAGENGINE_FUZZ_SEED repeats a run.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException

from ragengine_operator.manifests.labels import Owner
from ragengine_operator.reconcile.plan import plan
from ragengine_operator.spec import RAGEngineSpec

FUZZ_SPECS = int(os.environ.get("RAGENGINE_FUZZ_SPECS", "150"))
FUZZ_SECONDS = float(os.environ.get("RAGENGINE_FUZZ_SECONDS", "90"))
SEED = int(os.environ.get("RAGENGINE_FUZZ_SEED", "20261123"))
CRD = Path(__file__).resolve().parents[3] / "crds" / "ragengine.io_ragengines.yaml"


def _rules(node: Any) -> list[dict]:
    """Every x-kubernetes-validations rule anywhere in the CRD."""
    if isinstance(node, dict):
        return list(node.get("x-kubernetes-validations", [])) + [r for v in node.values() for r in _rules(v)]
    if isinstance(node, list):
        return [r for v in node for r in _rules(v)]
    return []

INFERENCE = {
    "model": ["Qwen/Qwen2.5-0.5B-Instruct", "", "m" * 600],
    "url": ["http://llm:8000/v1", "https://llm.example/v1", "ftp://llm/v1", "llm:8000"],
    "servedModelName": ["qwen", ""],
    "gpus": [1, 2, 0, 8, 9, 64, "2"],
    "replicas": [0, 1, 2, -1, 101],
    "contextWindow": [4096, 256, 100, 20_000_000],
    "args": [[], ["--enable-prefix-caching"], ["--port=9000"], ["--api-key", "x"], ["--max-model-len=2"], ["x" * 1100],
             ["--max_model_len=2"], ["--uds=/tmp/s"], ["other/model"], ["--served-model", "x"]],
    "toolCallParser": ["hermes", "none", "Bad Parser"],
    "revision": ["main", "a09a35458c702b33eeacc393d103063234e8bc28", "bad rev"],
    "modelCache": [{}, {"size": "10Gi"}, {"size": "0"}, {"size": "lots"}, {"accessMode": "ReadWriteMany"},
                   {"accessMode": "Sometimes"}, {"storageClassName": "fast"}],
    "startupTimeout": ["30m", "1h30m", "0m", "soon", ""],
    "apiKeySecretRef": [{"name": "k"}, {"key": "only-key"}],
    "hfTokenSecretRef": [{"name": "hf"}],
    "autoscaling": [{"maxReplicas": 2}, {"minReplicas": 3, "maxReplicas": 2}, {"maxReplicas": 0},
                    {"maxReplicas": 2, "metric": "requestsWaiting"},
                    {"maxReplicas": 2, "keda": {"serverAddress": "http://prometheus:9090"}},
                    {"maxReplicas": 2, "metric": "requestsWaiting", "keda": {"serverAddress": "http://prometheus:9090"}}],
    "gpuResourceName": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "gpu", "Bad Name/x", "amd.com/gpu"],
    "image": ["vllm/vllm-openai-rocm:v0.33.0"],
    "tolerations": [[{"key": "a", "operator": "Exists"}], [{"key": "a", "operator": "Maybe"}]],
    "podLabels": [{"team": "a"}, {"team": "x" * 70}],
    "env": [[{"name": "X", "value": "1"}], [{"name": "1-bad"}],
            [{"name": "Y", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]],
}
TOP = {
    "embedding": [{}, {"local": {"model": "BAAI/bge-small-en-v1.5"}}, {"remote": {"url": "http://emb/v1"}},
                  {"local": {"model": "m"}, "remote": {"url": "http://e/v1"}}, {"remote": {"apiKeySecretRef": {"name": "k"}}},
                  {"remote": {"url": "http://emb/v1", "apiKeySecretRef": {"name": "k"}}}, {"remote": {"url": "file:///x"}},
                  {"local": {}}],
    "retrieval": [{}, {"contextTokenRatio": 0.1}, {"contextTokenRatio": 0.5}, {"contextTokenRatio": 0.9},
                  {"similarityThreshold": -1}, {"similarityThreshold": 0.4}, {"hybrid": "maybe"}, {"rerankModel": "bge"}],
    "engine": [{}, {"replicas": 0}, {"replicas": 2}, {"replicas": 101}, {"autoscaling": {"maxReplicas": 3}},
               {"podLabels": {"a": "b"}, "priorityClassName": "high"}, {"env": [{"name": "X", "value": "1"}]},
               {"tolerations": [{"key": "d", "operator": "Exists", "effect": "NoSchedule"}]}, {"image": ""}],
    "storage": [{}, {"volume": {"size": "1Gi"}}, {"volume": {"size": "-1Gi"}}, {"volume": {"size": "1.5Gi"}},
                {"volume": {"storageClassName": "standard"}}, {"vectorStore": {"type": "postgres"}},
                {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}}},
                {"vectorStore": {"type": "milvus", "connectionSecretRef": {"name": "db"}, "prefix": "team_a"}},
                {"vectorStore": {"type": "milvus", "connectionSecretRef": {"name": "db"}, "prefix": "Bad-Prefix"}},
                {"vectorStore": {"type": "sqlite"}}, {"vectorStore": {"connectionSecretRef": {"name": "db"}}},
                {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}, "hnsw": {"m": 2}}},
                {"vectorStore": {"type": "postgres", "connectionSecretRef": {"name": "db"}, "hnsw": {"m": 16, "efSearch": 64}},
                 "sessions": {"databaseSecretRef": {"name": "db"}}}],
    "auth": [{}, {"apiKeySecretRef": {"name": "a"}}, {"apiKeySecretRef": {"key": "k"}}],
    "observability": [{}, {"metrics": {"kind": "PodMonitor", "interval": "15s"}}, {"metrics": {"kind": "Probe"}},
                      {"metrics": {"scrapeFrom": []}}, {"metrics": {"scrapeFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}},
                      {"tracing": {"endpoint": "http://otel:4317"}, "metrics": {}}],
}
SCALE_OUT = {"type": "postgres", "connectionSecretRef": {"name": "db"}}


def random_spec(rng: random.Random) -> dict:
    spec: dict = {}
    if rng.random() < 0.7:
        inf = {k: rng.choice(v) for k, v in INFERENCE.items() if rng.random() < 0.25}
        # mostly one of model/url, so the other rules are reached too
        mode = rng.random()
        if mode < 0.45:
            inf.pop("url", None)
            inf.setdefault("model", "Qwen/Qwen2.5-0.5B-Instruct")
        elif mode < 0.9:
            inf.pop("model", None)
            inf.setdefault("url", "http://llm:8000/v1")
        spec["inference"] = inf
    for key, values in TOP.items():
        if rng.random() < 0.35:
            spec[key] = rng.choice(values)
    if rng.random() < 0.15:
        spec["storage"] = {**spec.get("storage", {}), "vectorStore": SCALE_OUT}
    return spec


def dry_run_create(kube, ns: str, name: str, spec: dict) -> tuple[dict | None, list[dict]]:
    """(the defaulted object, []) when accepted; (None, the Status's causes) when refused."""
    try:
        return kube.create_rag(ns, name, spec, dry_run="All"), []
    except ApiException as exc:
        assert 400 <= exc.status < 500, f"{exc.status} for {spec}: {exc.body}"
        return None, (json.loads(exc.body).get("details") or {}).get("causes") or []


# The API server's note when schema errors stopped the CEL rules (it names no field of the spec).
NOT_CHECKED = "some validation rules were not checked"
CEL_MESSAGES = [rule["message"] for rule in _rules(yaml.safe_load(CRD.read_text())) if rule.get("message")]


def path_in(spec: dict, field: str) -> bool:
    """Whether the API server's ``field`` (``spec.a.b[0].c``) leads into ``spec``: every step but the last
    exists (the last may be the missing field a "Required" error names)."""
    steps = [s for s in re.split(r"\.|\[(\d+)\]", field) if s]
    if not steps or steps[0] != "spec":
        return False
    node: Any = spec
    for i, step in enumerate(steps[1:], start=1):
        last = i == len(steps) - 1
        if isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            return last
    return True


def check_rejection(spec: dict, causes: list[dict]) -> None:
    """A refusal names what is wrong: each cause's field is a path into the submitted spec, and a CEL
    rule's refusal ('Invalid value: "object"') carries that rule's own message from the CRD."""
    named = [c for c in causes if NOT_CHECKED not in c.get("message", "")]
    assert named, (SEED, spec, causes)
    for cause in named:
        assert path_in(spec, cause.get("field", "")), (SEED, spec, cause)
        if cause["message"].startswith('Invalid value: "object": '):
            rule = cause["message"].removeprefix('Invalid value: "object": ')
            assert rule in CEL_MESSAGES, (SEED, spec, cause)


def dry_run_children(kube, ns: str, rag: dict) -> None:
    meta = rag["metadata"]
    owner = Owner(ns, meta["name"], meta.get("uid") or str(uuid.uuid4()))
    spec = RAGEngineSpec.model_validate(rag["spec"])
    for obj in plan(owner, spec).apply:
        body = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "ownerReferences"}}
        create = {
            "Deployment": kube.apps.create_namespaced_deployment,
            "Service": kube.core.create_namespaced_service,
            "PersistentVolumeClaim": kube.core.create_namespaced_persistent_volume_claim,
        }.get(obj["kind"])
        if create is not None:
            try:
                create(ns, body, dry_run="All")
            except ApiException as exc:
                if exc.status != 409:  # a name taken by an earlier sample's real object is fine
                    raise AssertionError(f"{obj['kind']} planned from {rag['spec']} refused: {exc.body}") from exc


@pytest.fixture(scope="module")
def fuzz_ns(kube):
    name = f"fuzz-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": name}})
    yield name
    kube.core.delete_namespace(name)


def test_crd_rules_fuzzed_against_the_api_server(kube, fuzz_ns):
    rng = random.Random(SEED)
    accepted = rejected = 0
    deadline = time.monotonic() + FUZZ_SECONDS
    for i in range(FUZZ_SPECS):
        if time.monotonic() > deadline:
            break
        spec = random_spec(rng)
        rag, causes = dry_run_create(kube, fuzz_ns, f"f{i}", spec)
        if rag is None:
            rejected += 1
            check_rejection(spec, causes)
            continue
        accepted += 1
        try:
            RAGEngineSpec.model_validate(rag["spec"])
        except Exception as exc:
            raise AssertionError(f"seed {SEED}: the API server accepted {spec} (defaulted: {rag['spec']}) "
                                 f"but the operator's model refuses it: {exc}") from exc
        dry_run_children(kube, fuzz_ns, rag)
    print(f"\nCRD fuzz (seed {SEED}): {accepted + rejected} specs, {accepted} accepted, {rejected} rejected")
    # both sides were exercised, or the generator is broken
    assert accepted >= 10 and rejected >= 10, (accepted, rejected)
