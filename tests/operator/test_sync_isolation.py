"""Source syncs out of the operator's process and identity (issue 22, Deliver item 1), without a cluster:
the Job a sync becomes, the wire between operator and worker, and the subprocess worker's limits
(real child processes, real HTTP servers on loopback)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragengine_operator import constants as c
from ragengine_operator.manifests.engine import engine_network_policy
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.manifests.sync_job import REQUEST_ANNOTATION, SyncPod, sync_job, sync_job_name
from ragengine_operator.settings import OperatorSettings
from ragengine_operator.sources.protocol import (
    RESULT_LIMIT,
    Limits,
    Prepared,
    SyncRequest,
    decode_result,
    encode_result,
    result_from_exit,
    result_from_job,
    result_from_pod,
)
from ragengine_operator.sources.sync import SyncResult, policy_settings
from ragengine_operator.spec import RAGEngineSpec, SecretKeyRef
from ragengine_operator.syncer.in_subprocess import SubprocessRunner, worker_env
from tests.support.server import refused_port
from tests.support.web import web_server

OWNER = Owner("team-a", "docs", "uid-1")
POD = SyncPod("registry.local/operator:1", cpu="500m", memory="768Mi", deadline_seconds=900, tmp_size="1Gi",
              node_selector=(("pool", "sync"),))
GIT = {"name": "handbook", "git": {"url": "https://git.example/h.git", "secretRef": {"name": "git-creds"}}}


def request(source=GIT, **kw) -> SyncRequest:
    return SyncRequest("sync", source["name"], source["name"], "http://docs.team-a.svc.cluster.local", source, **kw)


def job(**kw):
    return sync_job(OWNER, request(), POD, credentials="git-creds", api_key=SecretKeyRef(name="docs-api-key"), **kw)


# --- the Job ---------------------------------------------------------------------------------------
def test_the_sync_job_has_no_token_and_its_own_limits():
    j = job()
    assert (j["apiVersion"], j["kind"]) == ("batch/v1", "Job")
    assert j["metadata"]["namespace"] == "team-a" and j["metadata"]["name"] == "docs-sync-handbook"
    ref = j["metadata"]["ownerReferences"][0]
    assert ref["uid"] == "uid-1" and ref["controller"]  # goes with the RAGEngine
    spec = j["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 900 and spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["enableServiceLinks"] is False and pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"pool": "sync"}
    (ctr,) = pod["containers"]
    assert ctr["image"] == "registry.local/operator:1" and ctr["command"] == ["ragengine-operator", "sync-source"]
    assert ctr["resources"]["limits"] == {"cpu": "500m", "memory": "768Mi"}
    # Pod Security "restricted", read-only root, a bounded /tmp
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                      "readOnlyRootFilesystem": True}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": "1Gi"}
    assert {"name": "tmp", "mountPath": "/tmp"} in ctr["volumeMounts"]
    assert ctr["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_credentials_reach_the_job_by_reference_only():
    """The operator never reads a source's credentials in job mode: the Secret is a volume, the engine's key
    a secretKeyRef; the Job object (readable by anyone who reads Jobs) carries no secret value."""
    j = job()
    pod = j["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["RAGENGINE_SYNC_ENGINE_API_KEY"] == {
        "name": "RAGENGINE_SYNC_ENGINE_API_KEY", "valueFrom": {"secretKeyRef": {"name": "docs-api-key", "key": "api-key"}}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["credentials"]["secret"]["secretName"] == "git-creds"
    assert {"name": "credentials", "mountPath": "/var/run/ragengine/credentials", "readOnly": True} in ctr["volumeMounts"]
    sent = SyncRequest.from_json(env["RAGENGINE_SYNC_REQUEST"]["value"])
    assert sent == request() and j["metadata"]["annotations"][REQUEST_ANNOTATION] == sent.digest()
    # auth off: no key at all; a configMap source: its ConfigMap as a volume, no Secret
    cm = {"name": "faq", "configMap": {"name": "faq-docs"}}
    plain = sync_job(OWNER, request(cm, configmap_revision="7"), POD, configmap="faq-docs")
    pod = plain["spec"]["template"]["spec"]
    assert "RAGENGINE_SYNC_ENGINE_API_KEY" not in {e["name"] for e in pod["containers"][0]["env"]}
    assert {v["name"]: v for v in pod["volumes"]}["configmap"]["configMap"] == {"name": "faq-docs"}
    assert "credentials" not in {v["name"] for v in pod["volumes"]}


def test_the_engine_network_policy_rendered_not_enforced_admits_the_sync_pods():
    labels = job()["spec"]["template"]["metadata"]["labels"]
    assert labels[c.SELECTOR_COMPONENT] == c.COMPONENT_SYNC and labels["ragengine.io/source"] == "handbook"
    assert labels[c.LABEL_MANAGED_BY] == c.FIELD_MANAGER  # in the operator's (server-side filtered) pod watch
    policy = engine_network_policy(OWNER, RAGEngineSpec.model_validate({"engine": {"networkPolicy": {"allowFrom": []}}}))
    (peer,) = policy["spec"]["ingress"][0]["from"]
    assert all(labels[k] == v for k, v in peer["podSelector"]["matchLabels"].items())


def test_job_names_fit_a_label():
    long = {"name": "s" * 63, "configMap": {"name": "x"}}
    name = sync_job_name(Owner("ns", "r" * 40, "u"), request(long))
    assert len(name) <= 63 and name != sync_job_name(Owner("ns", "r" * 40, "u"), request({**long, "name": "t" * 63}))
    assert sync_job_name(OWNER, SyncRequest("prune", "faq", "faq", "http://e")) == "docs-prune-faq"


# --- the wire --------------------------------------------------------------------------------------
URLS = [f"https://docs.example/{'p' * 1900}/{i}.html" for i in range(20)]


def test_a_result_fits_a_termination_message_and_keeps_what_matters():
    validators = {u: {"etag": f'"{i:040d}"', "last_modified": "Mon, 01 Jan 2026 00:00:00 GMT", "digest": "d" * 64}
                  for i, u in enumerate(URLS)}
    result = SyncResult("docs", "http", ok=True, revision="sha256:" + "a" * 16, documents=20, skipped=3, chunks=90,
                        written=20, message="20 added, 0 updated " + "x" * 3000,
                        skipped_examples={f"{u}": "binary file" for u in URLS[:5]}, validators=validators)
    text = encode_result(result, URLS)
    assert len(text.encode()) <= RESULT_LIMIT < 4096
    back = decode_result(text, URLS)
    assert (back.ok, back.revision, back.documents, back.chunks, back.written) == (True, result.revision, 20, 90, 20)
    assert back.validators == validators  # keyed by position on the wire, by URL again here
    assert back.message.startswith("20 added") and back.message.endswith("...")
    small = SyncResult("faq", "configMap", ok=False, message="ConfigMap faq not found")
    assert decode_result(encode_result(small, []), []) == small
    assert decode_result("Traceback (most recent call last): ...", []) is None


def terminated(**state):
    return {"phase": "Failed", "containerStatuses": [{"name": "sync", "state": {"terminated": state}}]}


LIMITS = Limits(memory="768Mi", cpu_seconds=60, deadline_seconds=900)


def test_the_result_of_a_sync_pod_from_its_status():
    req = request()
    ok = SyncResult("handbook", "git", ok=True, revision="c" * 40, documents=3, written=3, message="3 added")
    done = {"phase": "Succeeded", "containerStatuses": [
        {"name": "sync", "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                  "message": encode_result(ok, [])}}}]}
    assert result_from_pod(done, req, LIMITS) == ok
    assert result_from_pod({"phase": "Running", "containerStatuses": [
        {"name": "sync", "state": {"running": {}}}]}, req, LIMITS) is None
    oom = result_from_pod(terminated(exitCode=137, reason="OOMKilled"), req, LIMITS)
    assert not oom.ok and "memory limit (768Mi)" in oom.message and oom.type == "git"
    crashed = result_from_pod(terminated(exitCode=1, reason="Error", message="...\nRuntimeError: boom\n"), req, LIMITS)
    assert "exit code 1" in crashed.message and "RuntimeError: boom" in crashed.message
    pull = result_from_pod({"phase": "Pending", "containerStatuses": [{"name": "sync", "state": {"waiting": {
        "reason": "CreateContainerConfigError", "message": 'secret "docs-api-key" not found'}}}]}, req, LIMITS)
    assert "cannot start" in pull.message and "docs-api-key" in pull.message
    empty = result_from_pod({"phase": "Succeeded", "containerStatuses": [
        {"name": "sync", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}, req, LIMITS)
    assert not empty.ok and "without a result" in empty.message
    deadline = result_from_job({"status": {"conditions": [{"type": "Failed", "status": "True",
                                                           "reason": "DeadlineExceeded"}]}}, req, LIMITS)
    assert "deadline (900 s)" in deadline.message
    assert result_from_job(None, req, LIMITS).message.startswith("the sync Job was deleted")
    assert "CPU-time limit (60 s" in result_from_exit(-signal.SIGXCPU, "", req, LIMITS).message


def test_a_subprocess_worker_gets_none_of_the_operators_environment(monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/home/op/.kube/config")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("RAGENGINE_OPERATOR_ENGINE_URL", "http://x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    env = worker_env("/tmp/scratch")
    assert not {k for k in env if k.startswith(("KUBE", "RAGENGINE", "AWS"))}
    assert env["HOME"] == env["TMPDIR"] == "/tmp/scratch" and env["HTTPS_PROXY"] == "http://proxy:3128"
    assert env["PATH"] == os.environ["PATH"]


# --- the subprocess worker under its limits (real processes) ----------------------------------------
class Trickle(BaseHTTPRequestHandler):
    """Answers one byte every 0.2 s, forever: only a deadline ends a fetch of it."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"a")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return

    def log_message(self, *args):
        pass


@pytest.fixture
def trickle():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/slow.txt"
    server.shutdown()


def run_worker(source: dict, limits: Limits, settings: OperatorSettings | None = None) -> tuple[SyncResult, float]:
    runner = SubprocessRunner(None, limits, "64Mi")  # type: ignore[arg-type]  # no references: no API reads
    start = time.monotonic()
    # the test servers listen on loopback, which the egress rules refuse unless the operator allows it
    policy = policy_settings(settings or OperatorSettings(sources_egress_allow=["127.0.0.0/8"]))
    result = asyncio.run(runner.run(OWNER, Prepared(request(source, fetch_policy=policy)), None))
    return result, time.monotonic() - start


def children() -> set[int]:
    me = os.getpid()
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == me}


def _ppid(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_a_subprocess_sync_is_killed_at_its_deadline_with_its_children(trickle):
    before = children()
    result, took = run_worker({"name": "slow", "http": {"urls": [trickle]}}, Limits("1Gi", 60, deadline_seconds=4))
    assert not result.ok and "deadline (4 s)" in result.message, result
    assert took < 30  # the fetch never ends by itself; the deadline ended it
    assert children() <= before  # the worker (and anything it started) is gone


def test_a_subprocess_sync_runs_under_its_address_space_limit(trickle):
    """32 MiB of address space cannot even hold the interpreter and the worker's imports: the limit is on
    the child before it reads its input, and its failure is reported, not raised."""
    result, _ = run_worker({"name": "tiny", "http": {"urls": [trickle]}}, Limits("32Mi", 60, 60))
    assert not result.ok and "out of memory at its limit (32Mi)" in result.message, result


def test_a_subprocess_sync_reports_a_failure_as_a_result():
    with refused_port() as port:
        source = {"name": "faq", "http": {"urls": [f"http://127.0.0.1:{port}/faq.txt"]}}
        result, _ = run_worker(source, Limits("1Gi", 60, 60))
    assert not result.ok and "unreachable" in result.message and result.type == "http", result
    assert json.loads(encode_result(result, []))["name"] == "faq"


def test_a_subprocess_sync_fetches_under_the_operators_egress_rules_and_caps():
    """The worker has no settings of its own: the operator's rules travel in the request. By default a
    redirect to the metadata address is refused there too; an operator-wide cap binds the worker."""
    routes = {"/a.txt": (200, {"Content-Type": "text/plain"}, b"First file, some words."),
              "/b.txt": (200, {"Content-Type": "text/plain"}, b"Second file, more words."),
              "/imds": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"")}
    with web_server(routes) as site:
        # the defaults, whatever the environment holds (the in-process operator of the integration tests sets
        # RAGENGINE_OPERATOR_SOURCES_EGRESS_ALLOW while it runs)
        direct, _ = run_worker({"name": "web", "http": {"urls": [site.url("/a.txt")]}}, Limits("1Gi", 60, 60),
                               OperatorSettings(sources_egress_allow=[], sources_cluster_cidrs=[]))
        assert not direct.ok and "refused by the egress policy: 127.0.0.1 is loopback" in direct.message, direct
        allowed = ["127.0.0.0/8"]
        hop, _ = run_worker({"name": "web", "http": {"urls": [site.url("/imds")]}}, Limits("1Gi", 60, 60),
                            OperatorSettings(sources_egress_allow=allowed))
        assert not hop.ok and "169.254.169.254 is link-local" in hop.message, hop
        capped, _ = run_worker({"name": "web", "http": {"urls": [site.url("/a.txt"), site.url("/b.txt")]}},
                               Limits("1Gi", 60, 60), OperatorSettings(sources_egress_allow=allowed, sources_max_bytes=30))
    assert not capped.ok and "more than 30 bytes" in capped.message, capped


def test_an_s3_workload_identity_runs_the_job_as_its_service_account_still_without_a_token():
    s3 = {"name": "lake", "s3": {"bucket": "lake", "serviceAccountName": "lake-reader"}}
    pod = sync_job(OWNER, request(s3), POD, service_account="lake-reader")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "lake-reader" and pod["automountServiceAccountToken"] is False
    assert "credentials" not in {v["name"] for v in pod["volumes"]}
