"""spec.sources on the real control plane: the operator syncs ConfigMaps and git repositories into a real
engine, reports each source in status.sources[] and SourcesSynced, posts Events, keeps going when one
source fails, and the API server refuses invalid sources with a clear message."""

from __future__ import annotations

import httpx
import pytest
from kubernetes.client.rest import ApiException

from ragengine_operator import constants as c
from tests.support.git_server import Repo, git_http_server

from .kube import wait_for

SYNCED = "SourcesSynced"
AUTH = ("reader", "s3cret-token")


def documents(engine: str, index: str) -> dict[str, dict]:
    resp = httpx.get(f"{engine}/indexes/{index}/documents", params={"limit": 100, "max_text_length": 100000})
    return {} if resp.status_code == 404 else {d["doc_id"]: d for d in resp.json()["documents"]}


def source_status(kube, ns: str, name: str, source: str) -> dict | None:
    entries = (kube.get_rag(ns, name).get("status") or {}).get("sources") or []
    return next((e for e in entries if e["name"] == source), None)


def wait_source(kube, ns: str, name: str, source: str, what: str, check, timeout: float = 60) -> dict:
    return wait_for(lambda: (e := source_status(kube, ns, name, source)) and check(e) and e, timeout, what)


def events(kube, ns: str, name: str) -> list:
    return [e for e in kube.core.list_namespaced_event(ns).items if e.involved_object.name == name]


def test_configmap_source_follows_edits_and_removal(kube, namespace, source_engine):
    ns, n = namespace, "faq"
    index = f"faq-{ns}"
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "faq"}, "data": {
        "install.md": "# Install\n\nRun the installer and accept the licence.\n",
        "upgrade.txt": "Upgrades keep your data.",
        "remove.md": "# Remove\n\nUninstalling deletes the program files only.\n"}})
    httpx.post(f"{source_engine}/index", json={"index_name": index, "documents": [
        {"doc_id": "by-hand", "text": "A document a user added through the API."}]}).raise_for_status()
    # checked every 10 s (the least allowed), not the default 30 s: the edit below is found by a check, sooner
    kube.create_rag(ns, n, {"sources": [{"name": "faq", "index": index, "interval": "10s", "configMap": {"name": "faq"}}]})
    kube.wait_ready(ns, n)
    kube.kubectl("wait", "-n", ns, "--for=condition=SourcesSynced", f"rag/{n}", "--timeout=60s")  # as users do
    version = kube.core.read_namespaced_config_map("faq", ns).metadata.resource_version
    entry = wait_source(kube, ns, n, "faq", "first sync", lambda e: e["synced"] and e.get("revision") == version)
    assert entry["type"] == "configMap" and entry["index"] == index and entry["documents"] == 3, entry
    assert entry["chunks"] >= 4 and entry["lastSyncTime"], entry
    wait_for(lambda: (x := kube.condition(ns, n, SYNCED)) and x["status"] == "True", 20, "SourcesSynced=True")
    assert set(documents(source_engine, index)) == {"by-hand", "faq:install.md", "faq:upgrade.txt", "faq:remove.md"}
    held = documents(source_engine, index)["faq:install.md"]["metadata"]
    assert held["source"] == "faq" and held["path"] == "install.md" and held["revision"] == version

    # edited and shrunk: one key changed, one removed
    kube.core.replace_namespaced_config_map("faq", ns, {"metadata": {"name": "faq"}, "data": {
        "install.md": "# Install\n\nRun the installer; no licence prompt any more.\n",
        "upgrade.txt": "Upgrades keep your data."}})
    version = kube.core.read_namespaced_config_map("faq", ns).metadata.resource_version
    wait_source(kube, ns, n, "faq", "re-sync after the edit", lambda e: e.get("revision") == version, timeout=90)
    docs = documents(source_engine, index)
    assert set(docs) == {"by-hand", "faq:install.md", "faq:upgrade.txt"}
    assert "no licence prompt" in docs["faq:install.md"]["text"]
    wait_for(lambda: any(e.reason == "SourceSynced" and "1 updated, 1 deleted" in e.message
                         for e in events(kube, ns, n)), 30, "the SourceSynced Event of the re-sync")  # posted after status
    columns = kube.kubectl("get", "rag", n, "-n", ns).stdout.split("\n")[0].split()
    assert columns[:5] == ["NAME", "READY", "MODEL", "ENDPOINT", "SOURCES"], columns

    # the source leaves the spec: its documents go, the user's stays, the condition goes
    kube.patch_rag(ns, n, {"spec": {"sources": None}})
    wait_for(lambda: set(documents(source_engine, index)) == {"by-hand"}, 30, "the source's documents deleted")
    wait_for(lambda: not (kube.get_rag(ns, n).get("status") or {}).get("sources")
             and kube.condition(ns, n, SYNCED) is None, 30, "status.sources and SourcesSynced gone")


def test_git_source_follows_each_commit(kube, namespace, source_engine, tmp_path):
    ns, n = namespace, "handbook"
    index = f"handbook-{ns}"
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("guide.md", "# Guide\n\nThe engine answers from the handbook.\n")
    repo.write("old-name.md", "# Old\n\nThis page will be renamed.\n")
    repo.write("gone.txt", "This file will be deleted.")
    first = repo.commit("first")
    with git_http_server(root, auth=AUTH) as base:
        kube.core.create_namespaced_secret(ns, {"metadata": {"name": "git"},
                                                "stringData": {"username": AUTH[0], "password": AUTH[1]}})
        kube.create_rag(ns, n, {"sources": [{"name": "handbook", "index": index, "interval": "10s",
                                             "git": {"url": f"{base}/docs.git", "secretRef": {"name": "git"}}}]})
        entry = wait_source(kube, ns, n, "handbook", "first commit", lambda e: e.get("revision") == first)
        assert entry["synced"] and entry["documents"] == 3, entry
        assert set(documents(source_engine, index)) == {"handbook:guide.md", "handbook:old-name.md", "handbook:gone.txt"}

        repo.write("guide.md", "# Guide\n\nThe engine answers from the handbook, with citations.\n")
        repo.move("old-name.md", "new-name.md")
        repo.remove("gone.txt")
        repo.write("added.rst", "Added\n=====\n\nA new page.\n")
        second = repo.commit("second")
        entry = wait_source(kube, ns, n, "handbook", "second commit", lambda e: e.get("revision") == second, timeout=60)
        docs = documents(source_engine, index)
        assert set(docs) == {"handbook:guide.md", "handbook:new-name.md", "handbook:added.rst"}
        assert "with citations" in docs["handbook:guide.md"]["text"]
        assert docs["handbook:added.rst"]["metadata"]["revision"] == second
        assert "2 added, 1 updated, 2 deleted" in entry["message"], entry
        assert kube.condition(ns, n, SYNCED)["status"] == "True"


def test_a_failing_source_is_reported_and_the_others_sync(kube, namespace, source_engine, dead_port):
    ns, n = namespace, "mixed"
    index = f"mixed-{ns}"
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "good"}, "data": {"a.md": "# A\n\nFine.\n"}})
    kube.create_rag(ns, n, {"sources": [
        {"name": "good", "index": index, "configMap": {"name": "good"}},
        {"name": "missing", "index": index, "configMap": {"name": "no-such-configmap"}},
        {"name": "unreachable", "index": index, "git": {"url": f"http://127.0.0.1:{dead_port}/nothing.git"}},
        {"name": "no-secret", "index": index, "git": {"url": "https://git.invalid/x.git", "secretRef": {"name": "absent"}}},
    ]})
    wait_source(kube, ns, n, "good", "the good source", lambda e: e["synced"])
    reasons = {
        "missing": "ConfigMap no-such-configmap not found",
        "unreachable": "repository unreachable",
        "no-secret": "Secret absent not found",
    }
    for source, why in reasons.items():  # (a source tried while the engine was not ready yet says so first)
        entry = wait_source(kube, ns, n, source, f"{source} failed",
                            lambda e, why=why: not e["synced"] and why in e.get("message", ""))
        assert why in entry["message"], entry
    cond = wait_for(lambda: (x := kube.condition(ns, n, SYNCED)) and x["reason"] == "SyncFailed" and x, 20, "SyncFailed")
    assert cond["status"] == "False" and all(s in cond["message"] for s in reasons), cond
    assert kube.condition(ns, n, c.READY)["status"] == "True"  # a failing source never makes the engine unready
    assert set(documents(source_engine, index)) == {"good:a.md"}
    warnings = wait_for(lambda: [e for e in events(kube, ns, n) if e.reason == "SourceSyncFailed"], 20, "Warning Events")
    assert all(e.type == "Warning" for e in warnings)


@pytest.mark.parametrize("source, message", [
    ({"name": "two", "configMap": {"name": "a"}, "git": {"url": "https://git.example/r.git"}},
     "exactly one of configMap, git, http"),
    ({"name": "none"}, "exactly one of configMap, git, http"),
    ({"name": "fast", "interval": "5s", "configMap": {"name": "a"}}, "interval must be at least 10s"),
    ({"name": "odd", "interval": "ten minutes", "configMap": {"name": "a"}}, "spec.sources[0].interval"),
    ({"name": "creds", "git": {"url": "https://user:token@git.example/r.git"}}, "must not contain credentials"),
    ({"name": "creds", "http": {"urls": ["https://user:pw@docs.example/faq.html"]}}, "must not contain credentials"),
    ({"name": "Bad_Name", "configMap": {"name": "a"}}, "spec.sources[0].name"),
])
def test_invalid_sources_are_refused(kube, namespace, source, message):
    with pytest.raises(ApiException) as refused:
        kube.create_rag(namespace, "bad", {"sources": [source]})
    assert refused.value.status == 422 and message in refused.value.body, refused.value.body


def test_two_sources_with_one_name_are_refused(kube, namespace):
    twice = [{"name": "docs", "configMap": {"name": "a"}}, {"name": "docs", "configMap": {"name": "b"}}]
    with pytest.raises(ApiException) as refused:
        kube.create_rag(namespace, "bad", {"sources": twice})
    assert refused.value.status == 422 and "Duplicate value" in refused.value.body, refused.value.body


def test_sync_sends_the_engine_api_key_and_a_restart_resyncs_nothing(kube, namespace, embedder, tmp_path):
    """The sync worker gets the engine's API key from the RAGEngine's auth Secret (an engine with auth
    refuses a sync without it), and a syncer that starts from the written status finds the source up to
    date. The worker is a subprocess without the operator's environment (syncer/in_subprocess.py)."""
    import asyncio
    import time

    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from ragengine_operator.controller import Controller
    from ragengine_operator.settings import OperatorSettings
    from ragengine_operator.sources.status import SourceState, after_sync
    from ragengine_operator.spec.sources import Source
    from ragengine_operator.syncer.runner import SourceSyncer, Target
    from tests.support.embedding import serve_engine

    ns = namespace
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "notes"}, "data": {"a.md": "# A\n\nAlpha.\n"}})
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "auth"}, "stringData": {"api-key": "right-key"}})
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "stale"}, "stringData": {"api-key": "wrong-key"}})
    source = Source.model_validate({"name": "notes", "configMap": {"name": "notes"}})
    app = create_app(EngineSettings(data_dir=tmp_path / "data", api_key="right-key"))
    with serve_engine(app, embedder) as base:
        settings = OperatorSettings(engine_url=base, sync_mode="subprocess")
        syncer = SourceSyncer(Controller(kube.api, settings))

        def sync(s: SourceSyncer, secret: str, state=None, progress=None, ready_since=1.0):
            target = Target(ns, "authed", "uid", (source,), (), True, (secret, "api-key"), ready_since)
            return asyncio.run(s.sync(target, source, state, progress))

        refused = sync(syncer, "stale")
        assert not refused.ok and "401" in refused.message, refused
        lines: list[str] = []
        done = sync(syncer, "auth", None, lines.append)
        assert done.ok and done.written == 1, done
        assert lines == [f"syncing {done.revision}: 1 of 1 documents written"]  # what status shows mid-sync
        entry = after_sync(source, None, done, 0.0).to_status(source)
        again = SourceSyncer(Controller(kube.api, settings))  # a restarted operator
        checked = sync(again, "auth", SourceState.from_status(entry))
        assert checked.ok and checked.message == "up to date" and checked.written == 0, checked
        # the same ConfigMap revision, checked since: no worker at all (a 30 s poll costs one GET)
        assert sync(again, "auth", SourceState.from_status(entry)).message == "up to date"
        # the index is lost (the engine came back with a new volume): the same revision is synced again
        httpx.delete(f"{base}/indexes/notes", headers={"Authorization": "Bearer right-key"}).raise_for_status()
        restored = sync(again, "auth", SourceState.from_status(entry), ready_since=time.time() + 1)
        assert restored.ok and restored.written == 1, restored
