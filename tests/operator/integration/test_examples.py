"""Every file in examples/ applies cleanly and becomes Ready under the operator."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"gpu-vllm.yaml", "external-llm.yaml", "cpu-retrieval-only.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_becomes_ready(kube, namespace, path):
    kube.kubectl("apply", "-n", namespace, "-f", str(path))
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["kind"] == "RAGEngine":
            rag = kube.wait_ready(namespace, doc["metadata"]["name"], timeout=60)
            assert rag["status"]["endpoint"].startswith(f"http://{doc['metadata']['name']}.{namespace}.svc")
