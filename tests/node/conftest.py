"""Fixtures for the end-to-end tests on the local cluster's REAL node (hack/node.sh, docs/local-control-plane.md).

Real containers from `make images`, on a real kubelet: the chart's operator (installed with helm, running
in-cluster under the chart's ServiceAccount and RBAC), the engine pods it renders, Services through
kube-proxy, names through CoreDNS, NetworkPolicies through kube-router's firewall, `local` volumes a
uid-1000 pod can write. The servers the engine talks to (the test LLM, git, PostgreSQL) run on this
machine at its own address, where pods reach them.

These tests FAIL, never skip, when the node or the images are missing: `make test` builds the images and
starts the node; the failure names the reason (`hack/node.sh check`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.llm_server import FakeLLM, create_llm_app
from tests.operator.integration.kube import Kube, wait_for
from tests.support.conversion import install_crd
from tests.support.server import port_for_external_server

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = ROOT / ".cluster" / "kubeconfig"
NODE = "ragengine-node"
ENGINE_IMAGE = "localhost/ragengine-engine:dev"
OPERATOR_IMAGE = "localhost/ragengine-operator:dev"
SYNC_IMAGE = "localhost/ragengine-sync:dev"  # the sync Jobs' (git, the document parsers: not in the operator's)
SYSTEM_NAMESPACE = "rag-e2e-system"
NAMESPACE_PATTERN = "e2e-*"  # what the chart's operator watches (the in-process test operator serves t-*)
ON_NODE = {"nodeSelector": {"node.ragengine.io/real": "true"},
           "tolerations": [{"key": "node.ragengine.io/real", "operator": "Exists", "effect": "NoSchedule"}]}
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}


def crictl(*args: str) -> str:
    """crictl against the real node's containerd (the binary is built with the cluster)."""
    out = subprocess.run([str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True, check=True).stdout
    bin_dir = out.split("PATH=")[1].split(":")[0]
    sock = f"unix://{ROOT / '.cluster' / 'node' / 'containerd.sock'}"
    return subprocess.run([f"{bin_dir}/crictl", "--runtime-endpoint", sock, "--image-endpoint", sock, *args],
                          capture_output=True, text=True, check=True).stdout


def machine_ip() -> str:
    out = subprocess.run(["ip", "-4", "route", "get", "1"], capture_output=True, text=True, check=True).stdout
    return out.split(" src ")[1].split()[0]


def node_up_log(lines: int = 30) -> str:
    """The end of what `hack/node.sh up` said (the step that failed, the kubelet's last lines), for a CI log."""
    log = ROOT / ".cluster" / "logs" / "node-up.log"
    if not log.exists():
        return "\n(no .cluster/logs/node-up.log: hack/node.sh up never ran)"
    return "\nthe end of .cluster/logs/node-up.log:\n" + "\n".join(log.read_text().splitlines()[-lines:])


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    out = subprocess.run([str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True, check=True).stdout
    return Path(out.split("PATH=")[1].split(":")[0])


@pytest.fixture(scope="session")
def kube(bin_dir, crd_webhook) -> Kube:
    """The admin's client, after checking that the real node is there, Ready, with the images."""
    if not KUBECONFIG.exists():
        pytest.fail("the local cluster is not up: run `hack/cluster.sh up` (make test does)", pytrace=False)
    api = k8s_config.new_client_from_config(config_file=str(KUBECONFIG))
    kube = Kube(api, kubectl=[str(bin_dir / "kubectl"), f"--kubeconfig={KUBECONFIG}"])
    try:
        node = kube.core.read_node(NODE)
    except k8s.ApiException as exc:
        why = subprocess.run([str(ROOT / "hack" / "node.sh"), "check"], capture_output=True, text=True).stdout.strip()
        pytest.fail(f"the real node {NODE} is not in the cluster ({exc.status}): "
                    f"{why or 'see .cluster/logs/kubelet.log; hack/cluster.sh up starts it'}{node_up_log()}",
                    pytrace=False)
    ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
    if not ready or ready[0].status != "True":
        pytest.fail(f"the real node {NODE} is not Ready: {ready[0].message if ready else 'no condition'}", pytrace=False)
    for ref in (ENGINE_IMAGE, OPERATOR_IMAGE, SYNC_IMAGE):  # asked of containerd: the node's image list lags an import
        try:
            crictl("inspecti", ref)
        except subprocess.CalledProcessError:
            pytest.fail(f"{ref} is not on the real node: run `make images` then `hack/cluster.sh load-images`",
                        pytrace=False)
    install_crd(kube, crd_webhook)  # both versions served, converted by the operator's webhook code
    return kube


@pytest.fixture(scope="session")
def host_ip() -> str:
    return machine_ip()


def restricted_namespace(kube: Kube, name: str) -> str:
    kube.core.create_namespace({"metadata": {"name": name, "labels": RESTRICTED}})
    wait_for(lambda: kube.core.read_namespaced_service_account("default", name), 30, f"{name}'s default ServiceAccount")
    return name


@pytest.fixture(scope="session")
def chart_operator(kube, bin_dir) -> Iterator[str]:
    """The operator installed from the chart with the local image, running on the real node."""
    with contextlib.suppress(k8s.ApiException):
        restricted_namespace(kube, SYSTEM_NAMESPACE)
    values = {
        "image": {"repository": OPERATOR_IMAGE.rsplit(":", 1)[0], "tag": "dev", "pullPolicy": "Never"},
        "defaults": {"engineImage": ENGINE_IMAGE},
        "watchNamespaces": [NAMESPACE_PATTERN],
        "crds": {"install": False},  # applied by the kube fixture, shared with the other tests
        "resyncSeconds": 10,
        # source syncs: Jobs in the RAGEngine's namespace, on the real node; the test servers (git, the LLM) listen
        # on this machine's private address, which the egress rules refuse unless the platform team allows it
        "sync": {"mode": "job", "image": SYNC_IMAGE, **ON_NODE, "egressAllow": [f"{machine_ip()}/32"]},
        **ON_NODE,
    }
    values_file = ROOT / ".cluster" / "e2e-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm = [str(bin_dir / "helm"), f"--kubeconfig={KUBECONFIG}"]
    subprocess.run([*helm, "upgrade", "--install", "rag-e2e", str(ROOT / "charts" / "ragengine"), "-n", SYSTEM_NAMESPACE,
                    "-f", str(values_file), "--wait", "--timeout", "180s"], check=True, capture_output=True, text=True)
    _run_current_image(kube, SYSTEM_NAMESPACE, OPERATOR_IMAGE)
    try:
        yield SYSTEM_NAMESPACE
    finally:
        subprocess.run([*helm, "uninstall", "rag-e2e", "-n", SYSTEM_NAMESPACE, "--wait", "--timeout", "60s"],
                       capture_output=True)


def _run_current_image(kube: Kube, namespace: str, ref: str) -> None:
    """After `make images` + `hack/cluster.sh load-images` the tag is the same but the image is new: a pod
    from an earlier run still runs the old one. Replace it, so the tests always test the working tree."""
    current = json.loads(crictl("inspecti", "-o", "json", ref))["status"]["id"]
    selector = "app.kubernetes.io/name=ragengine-operator"
    for pod in kube.core.list_namespaced_pod(namespace, label_selector=selector).items:
        status = (pod.status.container_statuses or [None])[0]
        if status is not None and status.image_id and status.image_id != current:
            kube.core.delete_namespaced_pod(pod.metadata.name, namespace)
    (deployment,) = kube.apps.list_namespaced_deployment(namespace, label_selector=selector).items
    replicas = deployment.spec.replicas  # the chart runs two, one of them leading (docs/upgrades.md)

    def all_ready():
        pods = [p for p in kube.core.list_namespaced_pod(namespace, label_selector=selector).items
                if p.metadata.deletion_timestamp is None]
        statuses = [c for p in pods for c in p.status.container_statuses or []]
        return (len(pods) == replicas and len(statuses) == replicas
                and all(c.ready for c in statuses) and pods)
    wait_for(all_ready, 120, f"the operator's {replicas} pods to run the current image")


@pytest.fixture(scope="module")
def namespace(kube) -> Iterator[str]:
    name = restricted_namespace(kube, f"e2e-{uuid.uuid4().hex[:8]}")
    yield name
    with contextlib.suppress(k8s.ApiException):
        kube.core.delete_namespace(name)


class RestartableServer:
    """A uvicorn server on the machine's address and a fixed port that a test can stop and start again."""

    def __init__(self, app, host: str) -> None:
        self.app, self.host, self.port = app, host, port_for_external_server(host)  # uvicorn fails if taken
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server is not None and self.server.started, 30, f"the server on {self.base}")

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=30)
        self.server = self.thread = None


@pytest.fixture(scope="module")
def llm(host_ip) -> Iterator[tuple[FakeLLM, RestartableServer]]:
    fake = FakeLLM()
    server = RestartableServer(create_llm_app(fake), host_ip)
    server.start()
    yield fake, server
    server.stop()


def pod_on_node(name: str, command: list[str], labels: dict[str, str] | None = None,
                image: str = ENGINE_IMAGE) -> dict:
    """A one-shot pod on the real node that PodSecurity `restricted` admits (the engine image has Python
    and httpx: the tests' in-cluster client)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {"app": "e2e-client"}},
            "spec": {**ON_NODE, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "client", "image": image, "command": command,
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def run_python(kube: Kube, namespace: str, script: str, *, labels: dict[str, str] | None = None,
               timeout: float = 120) -> tuple[str, str]:
    """Run ``script`` in a pod on the real node; (phase, logs) once it ends."""
    name = f"client-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespaced_pod(namespace, pod_on_node(name, ["python", "-c", script], labels))
    try:
        pod = wait_for(lambda: _ended(kube, namespace, name), timeout, f"pod {name} to end")
        return pod.status.phase, kube.core.read_namespaced_pod_log(name, namespace)
    finally:
        with contextlib.suppress(k8s.ApiException):
            kube.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def _ended(kube: Kube, namespace: str, name: str):
    pod = kube.core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def last_json(logs: str) -> dict:
    return json.loads(logs.strip().splitlines()[-1])


def wait_condition(kube: Kube, ns: str, name: str, ctype: str, status: str, timeout: float) -> dict:
    def check():
        cond = kube.condition(ns, name, ctype)
        return cond if cond and cond.get("status") == status else None
    return wait_for(check, timeout, f"{ctype}={status} on {ns}/{name}", interval=0.5)


def engine_pods(kube: Kube, ns: str, name: str) -> list[k8s.V1Pod]:
    selector = f"ragengine.io/ragengine={name},ragengine.io/component=engine"
    return kube.core.list_namespaced_pod(ns, label_selector=selector).items


def service_base(kube: Kube, ns: str, name: str) -> str:
    svc = kube.core.read_namespaced_service(name, ns)
    return f"http://{svc.spec.cluster_ip}:{svc.spec.ports[0].port}"


def _ready(url: str, headers: dict[str, str] | None) -> str:
    """``url``'s /ready answer: its status and body, or the error that kept it from answering (what
    ``wait_http`` leaves out)."""
    import httpx

    try:
        resp = httpx.get(f"{url}/ready", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        return repr(exc)
    return f"{resp.status_code} {resp.text[:600]}"


def wait_service_ready(kube: Kube, ns: str, name: str, headers: dict[str, str] | None = None) -> None:
    """The RAGEngine's Service answers /ready, within 120 s. Ready=True says the engine's pods are ready; the
    Service's EndpointSlice and kube-proxy's rules follow them on their own time (a full run's first request
    was refused right after Ready=True). If it never answers: each pod's own /ready and the EndpointSlices."""
    from ragengine_operator import constants as c

    base = service_base(kube, ns, name)
    try:
        wait_http(f"{base}/ready", 120, headers)
    except AssertionError as exc:
        pods = {p.metadata.name: _ready(f"http://{p.status.pod_ip}:{c.ENGINE_PORT}", headers)
                for p in engine_pods(kube, ns, name)}
        slices = kube.kubectl("get", "endpointslices", "-n", ns, "-o", "json").stdout
        endpoints = [[(e.get("addresses"), e.get("conditions")) for e in item.get("endpoints") or []]
                     for item in json.loads(slices)["items"]]
        raise AssertionError(f"{exc}; each pod's /ready: {pods}; EndpointSlices: {endpoints}") from exc


def wait_http(url: str, timeout: float, headers: dict[str, str] | None = None) -> None:
    import httpx

    def ok():
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(url, headers=headers, timeout=3).status_code == 200
        return False
    wait_for(ok, timeout, f"{url} to answer 200", interval=0.25)


CONTROL = "policy-control"  # a server every pod of its namespace may reach (its own NetworkPolicy says so)


def control_server(kube: Kube, namespace: str) -> str:
    """A small HTTP server in ``namespace`` that a NetworkPolicy opens to the namespace's pods, by pod
    selector, as the operator's policies do: reaching it proves the firewall has learnt a new client's address
    (kube-router refuses a pod for about a second after it starts), so a refusal seen after that is the
    policy's. Returns its URL; made once per namespace."""
    try:
        kube.core.read_namespaced_pod(CONTROL, namespace)
    except k8s.ApiException:
        policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                  "metadata": {"name": CONTROL, "namespace": namespace},
                  "spec": {"podSelector": {"matchLabels": {"app": CONTROL}}, "policyTypes": ["Ingress"],
                           "ingress": [{"from": [{"podSelector": {}}]}]}}
        kube.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(policy))
        server = pod_on_node(CONTROL, ["python", "-m", "http.server", "8080", "--directory", "/tmp"],
                             labels={"app": CONTROL})
        server["spec"]["restartPolicy"] = "Always"
        server["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
        server["spec"]["containers"][0]["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
        kube.core.create_namespaced_pod(namespace, server)

    def address():
        p = kube.core.read_namespaced_pod(CONTROL, namespace)
        return p.status.container_statuses and p.status.container_statuses[0].ready and p.status.pod_ip
    return f"http://{wait_for(address, 120, 'the policy control server')}:8080/"


def reach(kube: Kube, namespace: str, url: str, labels: dict[str, str] | None = None,
          headers: dict[str, str] | None = None) -> list:
    """From a new pod in ``namespace`` (with ``labels``): once the firewall knows the pod (it reaches the
    namespace's control server), three requests to ``url``; each gives a status code or an error name."""
    control = control_server(kube, namespace)
    phase, logs = run_python(kube, namespace, textwrap.dedent(f"""
        import httpx, json, time
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get({control!r}, timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        out = []
        for _ in range(3):
            try:
                out.append(httpx.get({url!r}, headers={headers or {}!r}, timeout=3).status_code)
            except httpx.TransportError as e:
                out.append(type(e).__name__)
        print(json.dumps(out))
    """), labels=labels)
    assert phase == "Succeeded", logs
    return json.loads(logs.strip().splitlines()[-1])
