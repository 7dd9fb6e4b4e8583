"""Source syncs as Jobs (sync_mode job, the chart's default) on the real control plane: the Job the operator
creates for each source, and what it makes of the pod's outcome. kwok runs no containers (and completes
Job pods it schedules at once, without a result), so the sync pods here are kept off kwok's nodes by the
operator's sync node selector and the test plays the kubelet: it writes the terminated container state a
real sync pod would have (docs/sources.md says what to run on a real node)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragengine_operator import constants as c
from ragengine_operator.manifests.sync_job import JOB_UID_LABEL, REQUEST_ANNOTATION
from ragengine_operator.sources.protocol import SyncRequest, encode_result
from ragengine_operator.sources.status import WAITING_FOR_ENGINE
from ragengine_operator.sources.sync import SyncResult

from .conftest import OPERATOR_ENV, OPERATOR_KUBECONFIG, ROOT
from .kube import wait_for

NOWHERE = '{"ragengine.io/test-node": "none"}'  # no node has it: the sync pods stay Pending, unscheduled


@pytest.fixture
def job_operator(kube, bare_namespace, tmp_path):
    env = {**os.environ, **OPERATOR_ENV, "KUBECONFIG": str(OPERATOR_KUBECONFIG), "RAGENGINE_OPERATOR_METRICS_PORT": "0",
           "RAGENGINE_OPERATOR_LIVENESS_PORT": "0", "RAGENGINE_OPERATOR_SYNC_MODE": "job",
           "RAGENGINE_OPERATOR_SYNC_IMAGE": "registry.local/ragengine-sync:test",
           "RAGENGINE_OPERATOR_SYNC_MEMORY": "512Mi", "RAGENGINE_OPERATOR_SYNC_CPU": "250m",
           "RAGENGINE_OPERATOR_SYNC_DEADLINE_SECONDS": "600", "RAGENGINE_OPERATOR_SYNC_NODE_SELECTOR": NOWHERE}
    # (the two sync Jobs stay Pending until the test plays the kubelet, holding both of the namespace's workers
    # by default: the refused source needs none, so it is reported all the same)
    env.pop("RAGENGINE_OPERATOR_ENGINE_URL", None)  # the Jobs call the engine's Service
    log = tmp_path / "operator.log"
    proc = subprocess.Popen([str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", bare_namespace],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    yield bare_namespace
    proc.terminate()
    proc.wait(timeout=30)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


def batch(kube):
    from kubernetes import client as k8s

    return k8s.BatchV1Api(kube.api)


def job(kube, ns: str, name: str):
    from kubernetes.client.rest import ApiException

    try:
        return kube.api.sanitize_for_serialization(batch(kube).read_namespaced_job(name, ns))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def source_status(kube, ns: str, name: str, source: str) -> dict | None:
    entries = (kube.get_rag(ns, name).get("status") or {}).get("sources") or []
    return next((e for e in entries if e["name"] == source), None)


def finish(kube, ns: str, uid: str, terminated: dict) -> str:
    """Play the kubelet: the Job's pod ends with this container state (and phase)."""
    (pod,) = wait_for(lambda: kube.pods(ns, f"{JOB_UID_LABEL}={uid}"), 30, "the Job's pod")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state = {"startedAt": now, "finishedAt": now, **terminated}
    phase = "Succeeded" if terminated.get("exitCode") == 0 else "Failed"
    kube.core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {"phase": phase, "containerStatuses": [
        {"name": "sync", "ready": False, "restartCount": 0, "image": pod.spec.containers[0].image, "imageID": "",
         "state": {"terminated": state}}]}})
    return pod.metadata.name


def test_each_sync_is_a_job_without_a_token_and_its_outcome_is_the_sources_status(kube, job_operator):
    ns, n = job_operator, "kb"
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "faq"}, "data": {"a.md": "# A\n", "b.md": "# B\n"}})
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "git-creds"},
                                            "stringData": {"username": "reader", "password": "s3cret-token"}})
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "sa-token", "annotations": {
        "kubernetes.io/service-account.name": "default"}}, "type": "kubernetes.io/service-account-token"})
    kube.create_rag(ns, n, {"sources": [
        {"name": "faq", "configMap": {"name": "faq"}},
        {"name": "handbook", "git": {"url": "https://git.example/handbook.git", "secretRef": {"name": "git-creds"}}},
        {"name": "stolen", "http": {"urls": ["https://attacker.example/"], "secretRef": {"name": "sa-token"}}},
    ]})
    kube.wait_ready(ns, n)

    # a ServiceAccount token as source credentials: refused by its type, and no Job is made for it
    # (with two workers per namespace, it may wait behind the other two; "waiting for the engine" is not its outcome)
    stolen = wait_for(lambda: (e := source_status(kube, ns, n, "stolen")) and not e["synced"]
                      and e["message"] != WAITING_FOR_ENGINE and e, 60, "stolen refused")
    assert "kubernetes.io/service-account-token: refused as source credentials" in stolen["message"], stolen
    assert job(kube, ns, f"{n}-sync-stolen") is None

    faq = wait_for(lambda: job(kube, ns, f"{n}-sync-faq"), 60, "the faq sync Job")
    git = wait_for(lambda: job(kube, ns, f"{n}-sync-handbook"), 60, "the handbook sync Job")
    uid = kube.get_rag(ns, n)["metadata"]["uid"]
    for j, source in ((faq, "faq"), (git, "handbook")):
        meta, spec = j["metadata"], j["spec"]
        assert meta["namespace"] == ns and meta["ownerReferences"][0]["uid"] == uid
        assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 600
        pod = spec["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        labels = spec["template"]["metadata"]["labels"]
        assert labels[c.SELECTOR_NAME] == n and labels[c.SELECTOR_COMPONENT] == c.COMPONENT_SYNC
        assert labels["ragengine.io/source"] == source
        (ctr,) = pod["containers"]
        assert ctr["image"] == "registry.local/ragengine-sync:test"
        assert ctr["resources"]["limits"] == {"cpu": "250m", "memory": "512Mi"}
        assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
        env = {e["name"]: e for e in ctr["env"]}
        assert env["RAGENGINE_SYNC_ENGINE_API_KEY"]["valueFrom"] == {
            "secretKeyRef": {"name": f"{n}-api-key", "key": "api-key"}}  # the generated key, by reference
        request = SyncRequest.from_json(env["RAGENGINE_SYNC_REQUEST"]["value"])
        assert request.engine_url == f"http://{n}.{ns}.svc.cluster.local" and request.name == source
        assert meta["annotations"][REQUEST_ANNOTATION] == request.digest()
        assert "s3cret-token" not in str(j)  # the credentials never pass through the operator
    volumes = {v["name"]: v for v in git["spec"]["template"]["spec"]["volumes"]}
    assert volumes["credentials"]["secret"]["secretName"] == "git-creds"
    volumes = {v["name"]: v for v in faq["spec"]["template"]["spec"]["volumes"]}
    assert volumes["configmap"]["configMap"]["name"] == "faq"
    version = kube.core.read_namespaced_config_map("faq", ns).metadata.resource_version
    assert SyncRequest.from_json({e["name"]: e for e in faq["spec"]["template"]["spec"]["containers"][0]["env"]}[
        "RAGENGINE_SYNC_REQUEST"]["value"]).configmap_revision == version
    # the pods exist: the namespace enforces Pod Security "restricted" and admitted them
    wait_for(lambda: kube.pods(ns, f"{JOB_UID_LABEL}={faq['metadata']['uid']}"), 30, "the faq pod admitted")

    # the kubelet reports what the worker wrote to its termination log: status.sources follows
    result = SyncResult("faq", "configMap", ok=True, revision=version, documents=2, written=2, chunks=2,
                        message="2 added, 0 updated, 0 deleted, 0 unchanged, 0 skipped")
    finish(kube, ns, faq["metadata"]["uid"], {"exitCode": 0, "reason": "Completed", "message": encode_result(result, [])})
    entry = wait_for(lambda: (e := source_status(kube, ns, n, "faq")) and e["synced"] and e, 30, "faq synced")
    assert entry["revision"] == version and entry["documents"] == 2 and entry["chunks"] == 2, entry
    wait_for(lambda: any(e.reason == "SourceSynced" and "2 added" in e.message
                         for e in kube.core.list_namespaced_event(ns).items), 30, "a SourceSynced Event")
    wait_for(lambda: job(kube, ns, f"{n}-sync-faq") is None, 30, "the finished Job deleted")

    # a sync killed at its memory limit: reported with the limit, retried with backoff by a new Job
    finish(kube, ns, git["metadata"]["uid"], {"exitCode": 137, "reason": "OOMKilled"})
    entry = wait_for(lambda: (e := source_status(kube, ns, n, "handbook")) and "memory" in e["message"] and e, 30,
                     "handbook failed")
    assert not entry["synced"] and "memory limit (512Mi)" in entry["message"], entry
    wait_for(lambda: any(e.reason == "SourceSyncFailed" and "memory limit" in e.message
                         for e in kube.core.list_namespaced_event(ns).items), 30, "a SourceSyncFailed Event")
    again = wait_for(lambda: (j := job(kube, ns, f"{n}-sync-handbook")) and j["metadata"]["uid"] != git["metadata"]["uid"]
                     and j, 60, "a retry Job after the backoff")
    cond = kube.condition(ns, n, "SourcesSynced")
    assert cond["status"] == "False" and "handbook" in cond["message"] and "stolen" in cond["message"]
    assert kube.condition(ns, n, c.READY)["status"] == "True"  # a failing source never makes the engine unready
    # a pod that cannot start (its Secret key is missing) fails the sync at once, not at the deadline
    (pod,) = wait_for(lambda: kube.pods(ns, f"{JOB_UID_LABEL}={again['metadata']['uid']}"), 30, "the retry's pod")
    kube.core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {"containerStatuses": [
        {"name": "sync", "ready": False, "restartCount": 0, "image": pod.spec.containers[0].image, "imageID": "",
         "state": {"waiting": {"reason": "CreateContainerConfigError",
                               "message": f'couldn\'t find key api-key in Secret {ns}/{n}-api-key'}}}]}})
    entry = wait_for(lambda: (e := source_status(kube, ns, n, "handbook")) and "cannot start" in e["message"] and e, 30,
                     "handbook cannot start")
    assert "CreateContainerConfigError" in entry["message"]
