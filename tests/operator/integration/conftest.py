"""Fixtures for the tests against the real local control plane (hack/cluster.sh up).

The cluster must be up: these tests FAIL (not skip) when it is not, so `make test` cannot pass
without having exercised the operator against a real API server.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
KUBECONFIG = ROOT / ".cluster" / "kubeconfig"
# Before kopf/kubernetes read it; the operator in these tests uses short periods.
os.environ["KUBECONFIG"] = str(KUBECONFIG)
os.environ.setdefault("RAGENGINE_OPERATOR_RESYNC_SECONDS", "5")
os.environ.setdefault("RAGENGINE_OPERATOR_WATCH_TIMEOUT_SECONDS", "10")
os.environ.setdefault("RAGENGINE_OPERATOR_METRICS_PORT", "0")
os.environ.setdefault("RAGENGINE_OPERATOR_LIVENESS_PORT", "0")

from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402

from .kube import Kube, wait_for  # noqa: E402

OPERATOR_NAMESPACES = "t-*"  # the shared in-process operator serves these; others run their own


@pytest.fixture(scope="session")
def kube() -> Kube:
    if not KUBECONFIG.exists():
        pytest.fail(f"the local control plane is not up ({KUBECONFIG} is missing): run `hack/cluster.sh up` first",
                    pytrace=False)
    api = k8s_config.new_client_from_config(config_file=str(KUBECONFIG))
    try:
        k8s.VersionApi(api).get_code(_request_timeout=5)
    except Exception as exc:
        pytest.fail(f"the local control plane does not answer ({exc.__class__.__name__}): run `hack/cluster.sh up`",
                    pytrace=False)
    kube = Kube(api)
    crd = ROOT / "crds" / "ragengine.io_ragengines.yaml"
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kube.kubectl("wait", "--for=condition=Established", "crd/ragengines.ragengine.io", "--timeout=30s")
    return kube


@pytest.fixture(scope="session")
def operator(kube):
    """The operator in this process (kopf's KopfRunner), serving namespaces t-*."""
    from kopf.testing import KopfRunner

    args = ["run", "--standalone", f"--namespace={OPERATOR_NAMESPACES}", "-m", "ragengine_operator.handlers"]
    with KopfRunner(args, timeout=60) as runner:
        yield runner
    assert runner.exception is None, runner.output[-3000:]
    output = runner.output
    if "Traceback (most recent call last)" in output:
        at = output.index("Traceback (most recent call last)")
        pytest.fail(f"the operator logged a traceback:\n{output[max(0, at - 1500):at + 3000]}", pytrace=False)


def _namespace(kube: Kube, prefix: str, request) -> str:
    slug = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")[:30].strip("-")
    name = f"{prefix}-{slug}-{uuid.uuid4().hex[:5]}"
    kube.core.create_namespace({"metadata": {"name": name}})
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
def bare_namespace(kube, request):
    """A namespace no operator serves (tests that run their own operator process)."""
    ns = _namespace(kube, "r", request)
    yield ns
    kube.delete_all_ragengines(ns, force=True)
    kube.core.delete_namespace(ns)


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    out = subprocess.run([str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True, check=True).stdout
    return Path(out.split("PATH=")[1].split(":")[0])


def pytest_collection_modifyitems(items):
    """Everything here needs the control plane: mark it (deselect with -m 'not cluster')."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)
