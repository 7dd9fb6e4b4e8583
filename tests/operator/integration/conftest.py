"""Fixtures for the tests against the real local control plane (hack/cluster.sh up).

The cluster must be up: these tests FAIL (not skip) when it is not, so `make test` cannot pass
without having exercised the operator against a real API server.

The production path: the API server runs hardened admission (hack/cluster.sh), test namespaces
enforce Pod Security "restricted", and the operator (in-process and as a subprocess) runs with a
token of the chart's own ServiceAccount under the chart's own ClusterRole, never as the admin.
The tests themselves use the admin kubeconfig and the kubectl built with the control plane.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.support.conversion import install_crd

from .kube import Kube, wait_for

ROOT = Path(__file__).resolve().parents[3]
KUBECONFIG = ROOT / ".cluster" / "kubeconfig"  # admin: the tests' own client
OPERATOR_KUBECONFIG = ROOT / ".cluster" / "operator.kubeconfig"  # the chart's ServiceAccount
CHART = ROOT / "charts" / "ragengine"
OPERATOR_NAMESPACE = "ragengine-system"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
# The operator's environment in these tests: its kubeconfig (the operator code resolves $KUBECONFIG when
# it logs in), short periods, no ports, source syncs in subprocesses of the operator (kwok's pods run no
# containers, so a sync Job would never run here; test_sync_jobs.py covers the Job mode on its own
# operator), and a CRD a test installs seen at once. Operator subprocesses get it explicitly
# (``{**os.environ, **OPERATOR_ENV}``); the in-process operator gets it only while it runs (the
# ``operator`` fixture), and the variables are put back when it stops. Nothing is set at import.
OPERATOR_ENV = {
    "KUBECONFIG": str(OPERATOR_KUBECONFIG),
    "RAGENGINE_OPERATOR_RESYNC_SECONDS": "5",
    "RAGENGINE_OPERATOR_WATCH_TIMEOUT_SECONDS": "10",
    "RAGENGINE_OPERATOR_METRICS_PORT": "0",
    "RAGENGINE_OPERATOR_LIVENESS_PORT": "0",
    "RAGENGINE_OPERATOR_SYNC_MODE": "subprocess",
    "RAGENGINE_OPERATOR_ADDON_RECHECK_SECONDS": "1",
    # the tests' git, HTTP and LLM servers listen on loopback, which the egress rules refuse by default
    "RAGENGINE_OPERATOR_SOURCES_EGRESS_ALLOW": '["127.0.0.0/8"]',
    # no push receiver in the operators the tests start (``receiver_url`` runs one as every replica does)
    "RAGENGINE_OPERATOR_RECEIVER_PORT": "0",
}


OPERATOR_NAMESPACES = "t-*"  # the shared in-process operator serves these; others run their own


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """The binaries built with the control plane (kubectl, helm, ...)."""
    out = subprocess.run([str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True, check=True).stdout
    return Path(out.split("PATH=")[1].split(":")[0])


@pytest.fixture(scope="session")
def kube(bin_dir, crd_webhook) -> Kube:
    if not KUBECONFIG.exists():
        pytest.fail(f"the local control plane is not up ({KUBECONFIG} is missing): run `hack/cluster.sh up` first",
                    pytrace=False)
    api = k8s_config.new_client_from_config(config_file=str(KUBECONFIG))
    try:
        k8s.VersionApi(api).get_code(_request_timeout=5)
    except Exception as exc:
        pytest.fail(f"the local control plane does not answer ({exc.__class__.__name__}): run `hack/cluster.sh up`",
                    pytrace=False)
    kube = Kube(api, kubectl=[str(bin_dir / "kubectl"), f"--kubeconfig={KUBECONFIG}"])
    install_crd(kube, crd_webhook)  # both versions served, converted by the operator's webhook code
    return kube


def helm_template(bin_dir: Path, *args: str) -> list[dict]:
    out = subprocess.run([str(bin_dir / "helm"), "template", "rag", str(CHART), "-n", OPERATOR_NAMESPACE, *args],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def service_account_kubeconfig(kube: Kube, sa: str, path: Path) -> Path:
    """A kubeconfig with a short-lived token of ServiceAccount `sa` (TokenRequest API)."""
    token = kube.kubectl("create", "token", sa, "-n", OPERATOR_NAMESPACE, "--duration=4h").stdout.strip()
    admin = yaml.safe_load(KUBECONFIG.read_text())
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": cluster["name"], "user": sa}}], "current-context": sa,
    }))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def operator_identity(kube, bin_dir) -> Path:
    """The chart's ServiceAccount, RBAC and Secret admission policy applied as the chart renders them; a
    kubeconfig for it. Every operator in the tests thus writes Secrets under the policy."""
    docs = helm_template(bin_dir, "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
                         "--show-only", "templates/admission-policy.yaml", "--show-only", "templates/webhook.yaml")
    docs = [d for d in docs if d["kind"] != "Service"]  # the webhook's Service: no operator pod behind it here
    kube.kubectl("create", "namespace", OPERATOR_NAMESPACE, check=False)
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    return service_account_kubeconfig(kube, sa, OPERATOR_KUBECONFIG)


@pytest.fixture(scope="session")
def source_engine(embedder, tmp_path_factory) -> str:
    """A real engine (FAISS, the packaged embedding model) that the operator's source syncs write to:
    kwok's pods run no containers, so the operator is pointed at this one through its engine_url
    setting (the same setting an operator running outside the cluster uses)."""
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import borrowed
    from tests.support.server import serve_app

    app = create_app(EngineSettings(data_dir=tmp_path_factory.mktemp("source-engine")))
    with borrowed(embedder) as own:
        app.state.embedder = own
        with serve_app(app) as base:
            yield base


@pytest.fixture(scope="session")
def receiver_url(operator_identity) -> Iterator[str]:
    """The push receiver as every operator replica runs it: runtime.py's side server (no lease, no kopf), its
    own Kubernetes client with the chart's ServiceAccount, on a free loopback port. It stands for a replica
    that does not lead: the shared operator (kopf, the leader here) acts on the annotations it writes."""
    from ragengine_operator import runtime
    from ragengine_operator.settings import OperatorSettings
    from tests.support.server import port_for_external_server

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(operator_identity))  # read once, when its client is made
        settings = OperatorSettings(receiver_port=port_for_external_server(), liveness_port=0, webhook_port=0)
        server = runtime.side_server(settings, lambda: None)
    server.start()
    try:
        yield f"http://127.0.0.1:{settings.receiver_port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def operator(kube, operator_identity, source_engine):
    """The operator in this process (kopf's KopfRunner), serving namespaces t-*."""
    from kopf.testing import KopfRunner

    env = {**OPERATOR_ENV, "RAGENGINE_OPERATOR_ENGINE_URL": source_engine}
    args = ["run", "--standalone", f"--namespace={OPERATOR_NAMESPACES}", "-m", "ragengine_operator.handlers"]
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        with KopfRunner(args, timeout=60) as runner:
            yield runner
    assert runner.exception is None, runner.output[-3000:]
    output = runner.output
    for at in operator_tracebacks(output):
        pytest.fail(f"the operator logged a traceback:\n{output[max(0, at - 1500):at + 3000]}", pytrace=False)


def operator_tracebacks(output: str) -> list[int]:
    """Where tracebacks start in the process's log, except those other servers running in the same test
    process log (Milvus Lite's gRPC server reports each method it does not implement with one)."""
    found, at = [], output.find("Traceback (most recent call last)")
    while at >= 0:
        previous = output[:at].rstrip("\n").rpartition("\n")[2]
        if "grpc._server" not in previous:
            found.append(at)
        at = output.find("Traceback (most recent call last)", at + 1)
    return found


def _namespace(kube: Kube, prefix: str, request) -> str:
    slug = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")[:30].strip("-")
    name = f"{prefix}-{slug}-{uuid.uuid4().hex[:5]}"
    kube.core.create_namespace({"metadata": {"name": name, "labels": RESTRICTED}})
    wait_for(lambda: kube.core.list_namespaced_service_account(name).items, 30, "default ServiceAccount")
    return name


@pytest.fixture
def namespace(kube, operator, request):
    """A fresh namespace served by the shared operator; RAGEngines are deleted (and GC'd) after."""
    ns = _namespace(kube, "t", request)
    yield ns
    kube.delete_all_ragengines(ns)
    kube.core.delete_namespace(ns)


@pytest.fixture
def bare_namespace(kube, operator_identity, request):
    """A namespace no operator serves (tests that run their own operator process)."""
    ns = _namespace(kube, "r", request)
    yield ns
    kube.delete_all_ragengines(ns, force=True)
    kube.core.delete_namespace(ns)


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test (held bound, never listening)."""
    from tests.support.server import refused_port

    with refused_port() as port:
        yield port


@pytest.fixture(scope="session")
def llm_url() -> str:
    """A reachable OpenAI-compatible endpoint (the vLLM-like test server) serving model `fake-llm`:
    url mode is Ready only when its inference URL answers."""
    from tests.llm_server import FakeLLM, create_llm_app
    from tests.support.server import serve_app

    with serve_app(create_llm_app(FakeLLM(model="fake-llm"))) as base:
        yield f"{base}/v1"


def pytest_collection_modifyitems(items):
    """Everything here needs the control plane: mark it (deselect with -m 'not cluster')."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)
