"""One RAGEngine, run for real: the chart's operator on the real node renders it, the kubelet runs it.

The tests run in file order on one RAGEngine (CPU engine, external LLM = the test LLM server at this
machine's address, index on a `ragengine-local` claim, an API key, a NetworkPolicy admitting its own
namespace), each checking what only a real node shows: probes on the declared port, uid 1000 on the
volume, Services through kube-proxy, names through CoreDNS, the policy enforced, a sync from inside the
cluster, data surviving a deleted pod and a killed process, conditions following a real LLM outage, and
real cgroup memory.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import httpx
import pytest
from kubernetes import client as k8s

from tests.node.conftest import (
    NODE,
    ON_NODE,
    ROOT,
    crictl,
    engine_pods,
    last_json,
    reach,
    restricted_namespace,
    run_python,
    service_base,
    wait_condition,
    wait_http,
    wait_service_ready,
)
from tests.operator.integration.kube import Kube, wait_for
from tests.support.git_server import git_http_server

NAME = "handbook"
KEY = "e2e-engine-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
DOC = {"doc_id": "pump-4", "text": "The cooling pump of line 4 must be restarted every Tuesday at 06:00."}


@pytest.fixture(scope="module")
def rag(kube: Kube, chart_operator, namespace, llm) -> str:
    _fake, server = llm
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "engine-key"}, "stringData": {"key": KEY}})
    kube.create_rag(namespace, NAME, {
        "inference": {"url": f"{server.base}/v1", "servedModelName": "fake-llm"},
        "engine": {**ON_NODE, "networkPolicy": {"allowFrom": [{"podSelector": {}}]}},  # its own namespace
        "storage": {"volume": {"storageClassName": "ragengine-local", "size": "1Gi"}},
        "auth": {"apiKeySecretRef": {"name": "engine-key", "key": "key"}},
    })
    wait_condition(kube, namespace, NAME, "Ready", "True", 180)
    wait_service_ready(kube, namespace, NAME, AUTH)
    return namespace


def _base(kube: Kube, ns: str) -> str:
    return service_base(kube, ns, NAME)


def _retrieve(base: str, query: str, index: str = "plant") -> list[str]:
    resp = httpx.post(f"{base}/retrieve", headers=AUTH, timeout=60, json={"index_name": index, "query": query})
    assert resp.status_code == 200, resp.text
    return [r["doc_id"] for r in resp.json()["results"]]


def test_the_charts_operator_runs_in_the_cluster_on_the_real_node(kube, chart_operator):
    selector = "app.kubernetes.io/name=ragengine-operator"
    pods = [p for p in kube.core.list_namespaced_pod(chart_operator, label_selector=selector).items
            if p.metadata.deletion_timestamp is None]
    assert len(pods) == 2, [p.metadata.name for p in pods]  # the chart's two replicas, one leading
    for pod in pods:
        assert pod.spec.node_name == NODE
        assert pod.spec.service_account_name.endswith("ragengine-operator") or "ragengine" in pod.spec.service_account_name
        assert all(c.ready for c in pod.status.container_statuses)
        out = kube.kubectl("exec", "-n", chart_operator, pod.metadata.name, "--", "id", "-u").stdout.strip()
        assert out == "1000"


def test_the_engine_is_ready_by_its_own_probes_and_runs_as_uid_1000(kube, rag):
    pods = engine_pods(kube, rag, NAME)
    assert len(pods) == 1 and pods[0].spec.node_name == NODE
    container = pods[0].spec.containers[0]
    assert container.readiness_probe.http_get.path == "/ready" and container.readiness_probe.http_get.port == "http"
    assert pods[0].status.container_statuses[0].ready
    uid = kube.kubectl("exec", "-n", rag, pods[0].metadata.name, "--", "id", "-u").stdout.strip()
    assert uid == "1000"
    owner = kube.kubectl("exec", "-n", rag, pods[0].metadata.name, "--", "stat", "-c", "%u:%g", "/data/indexes").stdout
    assert owner.strip() == "1000:1000"  # the engine wrote its volume: fsGroup applied to the local PV


def test_index_retrieve_and_chat_through_the_service_from_the_host(kube, rag, llm):
    fake, _server = llm
    base = _base(kube, rag)
    resp = httpx.post(f"{base}/index", headers=AUTH, timeout=120, json={"index_name": "plant", "documents": [DOC]})
    assert resp.status_code == 200, resp.text
    assert _retrieve(base, "when is the line 4 pump restarted?")[:1] == ["pump-4"]
    fake.reset()
    chat = httpx.post(f"{base}/v1/chat/completions", headers=AUTH, timeout=120, json={
        "index_name": "plant", "messages": [{"role": "user", "content": "When is the line 4 pump restarted?"}]})
    assert chat.status_code == 200, chat.text
    assert chat.json()["rag"]["applied"] is True
    assert "every Tuesday" in str(fake.last_chat()["messages"])
    assert httpx.get(f"{base}/indexes", timeout=10).status_code == 401


def test_a_pod_in_the_namespace_reaches_it_by_its_dns_name(kube, rag):
    url = f"http://{NAME}.{rag}.svc.cluster.local/indexes"
    phase, logs = run_python(kube, rag, textwrap.dedent(f"""
        import httpx, json, time
        deadline = time.monotonic() + 20
        while True:  # the firewall admits a new pod's address within about a second of its start
            try:
                r = httpx.get({url!r}, headers={AUTH!r}, timeout=3)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.25)
        print(json.dumps({{"status": r.status_code, "indexes": r.json()}}))
    """))
    assert phase == "Succeeded", logs
    assert last_json(logs) == {"status": 200, "indexes": ["plant"]}


def test_a_pod_in_an_unrelated_namespace_is_refused_by_the_policy(kube, rag):
    other = restricted_namespace(kube, f"e2e-other-{uuid.uuid4().hex[:6]}")
    try:
        results = reach(kube, other, f"http://{NAME}.{rag}.svc.cluster.local/health")
        assert all(isinstance(r, str) for r in results), f"a pod of another namespace got through: {results}"
    finally:
        kube.core.delete_namespace(other)


def _git_repo(root: Path) -> Path:
    work = root / "work"
    work.mkdir()
    (work / "runbook.md").write_text("# Boiler runbook\n\nThe boiler pressure valve is inspected every Friday.\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
           "HOME": str(root), "PATH": "/usr/bin:/bin"}
    for cmd in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "runbook"]):
        subprocess.run(["git", *cmd], cwd=work, env=env, check=True)
    bare = root / "srv" / "runbook.git"
    bare.parent.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, env=env)
    return bare.parent


def test_a_configmap_source_and_a_git_source_sync_into_it(kube, rag, host_ip, tmp_path):
    kube.core.create_namespaced_config_map(rag, {"metadata": {"name": "faq-docs"}, "data": {
        "heating.md": "# Heating\n\nThe heating is switched on when the outside temperature drops below 12 degrees.\n"}})
    with git_http_server(_git_repo(tmp_path), host=host_ip) as git_base:
        kube.patch_rag(rag, NAME, {"spec": {"sources": [
            {"name": "faq", "index": "docs", "configMap": {"name": "faq-docs"}},
            {"name": "runbook", "index": "docs", "git": {"url": f"{git_base}/runbook.git", "ref": "main"}},
        ]}})
        cond = wait_condition(kube, rag, NAME, "SourcesSynced", "True", 180)
    assert cond["reason"]
    base = _base(kube, rag)
    assert _retrieve(base, "when is the heating switched on?", "docs")[0] == "faq:heating.md"
    assert _retrieve(base, "how often is the boiler pressure valve inspected?", "docs")[0].startswith("runbook:")


def _engine_pod(kube: Kube, ns: str) -> k8s.V1Pod:
    pods = [p for p in engine_pods(kube, ns, NAME) if p.metadata.deletion_timestamp is None]
    assert len(pods) == 1
    return pods[0]


def test_deleting_the_pod_keeps_the_index(kube, rag):
    old = _engine_pod(kube, rag)
    kube.core.delete_namespaced_pod(old.metadata.name, rag)

    def replaced_and_ready():
        pods = [p for p in engine_pods(kube, rag, NAME) if p.metadata.uid != old.metadata.uid]
        return pods and pods[0].status.container_statuses and pods[0].status.container_statuses[0].ready
    wait_for(replaced_and_ready, 180, "a new engine pod to be Ready")
    wait_http(f"{_base(kube, rag)}/ready", 60)
    assert _retrieve(_base(kube, rag), "when is the line 4 pump restarted?")[:1] == ["pump-4"]


def test_a_killed_engine_process_is_restarted_and_loses_no_acknowledged_document(kube, rag):
    base = _base(kube, rag)
    acknowledged = {"doc_id": "valve-7", "text": "Valve 7 on the steam line is replaced every second year."}
    resp = httpx.post(f"{base}/index", headers=AUTH, timeout=60, json={"index_name": "plant", "documents": [acknowledged]})
    assert resp.status_code == 200, resp.text  # acknowledged: from here on it must survive anything
    pod = _engine_pod(kube, rag)
    status = pod.status.container_statuses[0]
    container_id = status.container_id.split("://", 1)[1]
    pid = json.loads(crictl("inspect", container_id))["info"]["pid"]
    killed_at = time.time()
    subprocess.run(["kill", "-9", str(pid)], check=True)  # from the host, as the OOM killer would

    def restarted():
        s = kube.core.read_namespaced_pod(pod.metadata.name, rag).status.container_statuses[0]
        return s.restart_count > status.restart_count and s.ready and s
    after = wait_for(restarted, 180, "the kubelet to restart the engine and the pod to be Ready again")
    assert after.last_state.terminated.exit_code == 137
    wait_http(f"{base}/ready", 60)
    assert "valve-7" in _retrieve(base, "how often is valve 7 on the steam line replaced?")

    def told():  # the RAGEngine's conditions said so: Ready went False because the engine restarted, then True
        events = kube.core.list_namespaced_event(rag, field_selector=f"involvedObject.name={NAME}").items
        recent = [e for e in events if (e.last_timestamp or e.metadata.creation_timestamp).timestamp() >= killed_at - 1]
        restarting = [e.message for e in recent if e.reason == "Restarting"]
        back = [e for e in recent if e.reason == "Available"]
        return restarting and back and restarting
    said = wait_for(told, 120, "Events saying the engine restarted, then that it is available again")
    assert "exit code 137" in said[0]


def argo_health(rag_object: dict) -> dict:
    """Argo CD's verdict on a live RAGEngine, by the Lua health check docs/operator.md tells users to install
    (read from the docs, run by a real Lua interpreter)."""
    import re

    import yaml
    from lupa import LuaRuntime

    docs = (ROOT / "docs" / "operator.md").read_text()
    block = re.search(r"```yaml\n(data:\n  resource\.customizations\.health\.ragengine\.io_RAGEngine:.*?)```", docs, re.S)
    assert block, "the Argo CD health check is no longer in docs/operator.md"
    script = yaml.safe_load(block.group(1))["data"]["resource.customizations.health.ragengine.io_RAGEngine"]
    lua = LuaRuntime(unpack_returned_tuples=True)

    def table(value):
        if isinstance(value, dict):
            return lua.table_from({k: table(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([table(v) for v in value])
        return value
    verdict = lua.eval(f"function(obj)\n{script}\nend")(table(rag_object))
    return dict(verdict.items())


def test_conditions_follow_a_real_llm_outage_while_retrieval_keeps_answering(kube, rag, llm):
    _fake, server = llm
    base = _base(kube, rag)
    assert argo_health(kube.get_rag(rag, NAME))["status"] == "Healthy"
    server.stop()
    try:
        cond = wait_condition(kube, rag, NAME, "InferenceReady", "False", 60)
        assert server.base in cond["message"] or "unreachable" in cond["message"].lower(), cond
        assert kube.condition(rag, NAME, "EngineReady")["status"] == "True"
        assert _retrieve(base, "when is the line 4 pump restarted?")[:1] == ["pump-4"]
        chat = httpx.post(f"{base}/v1/chat/completions", headers=AUTH, timeout=120, json={
            "index_name": "plant", "messages": [{"role": "user", "content": "When is the line 4 pump restarted?"}]})
        assert chat.status_code == 200, chat.text  # the extractive fallback answers from the index
        assert "Tuesday" in chat.json()["choices"][0]["message"]["content"]
        assert argo_health(kube.get_rag(rag, NAME))["status"] == "Degraded"
        assert _engine_pod(kube, rag).status.container_statuses[0].ready  # the engine stayed in the Service
    finally:
        server.start()
    wait_condition(kube, rag, NAME, "InferenceReady", "True", 60)
    wait_condition(kube, rag, NAME, "Ready", "True", 60)
    assert argo_health(kube.get_rag(rag, NAME))["status"] == "Healthy"


def _cgroup_peak_bytes(pod: k8s.V1Pod) -> int:
    """The engine container's peak memory, from its cgroup on the node (cgroup v1: memory.max_usage_in_bytes)."""
    container_id = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    info = json.loads(crictl("inspect", container_id))["info"]
    cgroup = info["runtimeSpec"]["linux"]["cgroupsPath"]  # cgroupfs driver: a path under each hierarchy
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
            path = Path(root + cgroup) / name
            if path.exists():
                return int(path.read_text())
    raise AssertionError(f"no memory cgroup file for {cgroup}")


def test_indexing_the_sample_corpus_stays_within_the_default_memory_limit(kube, rag):
    base = _base(kube, rag)
    files = sorted((ROOT / "engine" / "ragengine" / "sample").glob("*.md")) + sorted((ROOT / "docs").glob("*.md"))
    docs = [{"doc_id": f"{p.parent.name}/{p.name}", "text": p.read_text()} for p in files]  # sample corpus + docs
    pod = _engine_pod(kube, rag)
    restarts = pod.status.container_statuses[0].restart_count
    resp = httpx.post(f"{base}/index", headers=AUTH, timeout=300, json={"index_name": "sample", "documents": docs})
    assert resp.status_code == 200, resp.text
    pod = _engine_pod(kube, rag)
    assert pod.status.container_statuses[0].restart_count == restarts  # no OOM kill
    limit = pod.spec.containers[0].resources.limits["memory"]
    peak = _cgroup_peak_bytes(pod)
    print(f"\nengine peak memory {peak / 2**20:.0f} MiB of a {limit} limit")  # recorded in docs/operator.md
    assert peak > 50 * 2**20  # the cgroup is the container's: it holds the model and the index


def test_a_missing_image_is_reported_within_a_minute(kube, rag):
    kube.create_rag(rag, "broken", {"engine": {**ON_NODE, "image": "localhost/ragengine-engine:does-not-exist"},
                                    "storage": {"volume": {"storageClassName": "ragengine-local", "size": "1Gi"}}})
    try:
        cond = wait_for(lambda: (c := kube.condition(rag, "broken", "EngineReady")) and c["reason"] in (
            "ErrImagePull", "ImagePullBackOff") and c, 60, "EngineReady to report the image pull failure")
        assert "does-not-exist" in cond["message"]
        assert kube.condition(rag, "broken", "Degraded")["status"] == "True"
    finally:
        kube.delete_rag(rag, "broken")
