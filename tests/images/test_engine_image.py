"""The engine image, run with exactly the container spec the operator renders (no cluster needed).

The pod spec comes from the operator's own builder (``manifests.engine.engine_deployment``) for the
`external-llm` example; ``tests.support.podman.run_args`` turns it into ``podman run`` (command, env with
the Secrets resolved, user and group, read-only root, dropped capabilities, no privilege escalation, the
index claim as a host directory owned by the fsGroup, emptyDirs as tmpfs). The engine must pass its own
probes at the declared path and port, index, retrieve and chat against the test LLM server (reached at
the machine's address, as a pod would), keep its index across a restart, and run as uid 1000.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from ragengine_operator.manifests.engine import data_pvc_name, engine_deployment, engine_embedding_configmap
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.spec import RAGEngineSpec
from tests.llm_server import FakeLLM, create_llm_app
from tests.support import podman
from tests.support.server import port_for_external_server, serve_app

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/ragengine-engine:dev"
ENGINE_KEY = "engine-key-0123456789abcdef"


def machine_ip() -> str:
    out = subprocess.run(["ip", "-4", "route", "get", "1"], capture_output=True, text=True, check=True).stdout
    return out.split(" src ")[1].split()[0]


@pytest.fixture(scope="module")
def llm():
    fake = FakeLLM()
    with serve_app(create_llm_app(fake), host=machine_ip()) as base:
        yield fake, base


def rendered_pod(llm_base: str) -> tuple[Owner, dict, dict[str, dict[str, str]]]:
    """The engine pod the operator renders for the example, and the ConfigMaps it mounts (name -> data)."""
    docs = list(yaml.safe_load_all((ROOT / "examples" / "external-llm.yaml").read_text()))
    spec = next(d for d in docs if d["kind"] == "RAGEngine")["spec"]
    spec.pop("embedding")  # the image's own packaged model, not the example's remote embeddings service
    spec["inference"].update(url=f"{llm_base}/v1", servedModelName="fake-llm")  # the test LLM server
    owner = Owner(namespace="default", name="support-bot", uid=str(uuid.uuid4()), engine_image=IMAGE)
    parsed = RAGEngineSpec.model_validate(spec)
    deployment = engine_deployment(owner, parsed)
    embedding = engine_embedding_configmap(owner, parsed, 1)
    return owner, deployment["spec"]["template"]["spec"], {embedding["metadata"]["name"]: embedding["data"]}


def probe_url(container: dict, probe: str, host_port: int) -> str:
    get = container[probe]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[get["port"]] == 8000, "the probe must target the port the engine serves"
    return f"http://127.0.0.1:{host_port}{get['path']}"


@pytest.fixture(scope="module")
def engine(llm, tmp_path_factory):
    podman.require_image(IMAGE)
    _fake, base = llm
    owner, pod, config_maps = rendered_pod(base)
    container = pod["containers"][0]
    port, name = port_for_external_server(), f"rag-image-{uuid.uuid4().hex[:8]}"  # podman run fails if taken
    data = tmp_path_factory.mktemp("engine-image") / "claim"
    mounts = podman.Mounts({data_pvc_name(owner): data}, config_maps)
    args = podman.run_args(pod, "engine", name=name, ports={8000: port}, mounts=mounts,
                           secrets={("llm-credentials", "api-key"): "upstream-key",
                                    ("llm-credentials", "engine-key"): ENGINE_KEY})
    subprocess.run(args, check=True, capture_output=True)
    try:
        podman.wait_http(probe_url(container, "startupProbe", port), 120, name)
        yield name, port, container, data
    finally:
        podman.remove(name)


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {ENGINE_KEY}"}


def test_the_rendered_spec_is_run_as_rendered(engine):
    _name, _port, container, _data = engine
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["command"][:2] == ["ragengine", "serve"]


def test_probes_pass_at_the_declared_path_and_port(engine):
    name, port, container, _data = engine
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        podman.wait_http(probe_url(container, probe, port), 60, name)


def test_runs_as_uid_1000_and_writes_its_volume_as_it(engine):
    name, _port, _container, data = engine
    assert podman.exec_(name, "id", "-u").strip() == "1000"
    assert podman.exec_(name, "id", "-g").strip() == "1000"
    owners = {p.stat().st_uid for p in data.rglob("*")}
    assert owners == {1000}, f"files on the index volume owned by {owners}"


def test_indexes_retrieves_and_chats_and_keeps_the_index_across_a_restart(engine, llm):
    name, port, container, _data = engine
    fake, _base = llm
    base = f"http://127.0.0.1:{port}"
    doc = {"text": "The cooling pump of line 4 must be restarted every Tuesday.", "doc_id": "pump-4"}
    assert httpx.post(f"{base}/index", headers=_auth(), timeout=120,
                      json={"index_name": "plant", "documents": [doc]}).status_code == 200
    hit = httpx.post(f"{base}/retrieve", headers=_auth(), timeout=60,
                     json={"index_name": "plant", "query": "when is the pump of line 4 restarted?"}).json()
    assert hit["results"][0]["doc_id"] == "pump-4"
    fake.reset()
    chat = httpx.post(f"{base}/v1/chat/completions", headers=_auth(), timeout=120, json={
        "index_name": "plant", "messages": [{"role": "user", "content": "When is the line 4 pump restarted?"}]})
    assert chat.status_code == 200, chat.text
    assert chat.json()["rag"]["applied"] is True
    assert "every Tuesday" in str(fake.chat_requests()[-1]["messages"])  # the LLM got the retrieved context
    assert httpx.get(f"{base}/v1/models", headers=_auth()).status_code == 200
    assert httpx.get(f"{base}/indexes").status_code == 401  # the rendered env carries the engine's key

    subprocess.run([podman.PODMAN, "restart", "--time", "60", name], check=True, capture_output=True)
    podman.wait_http(probe_url(container, "readinessProbe", port), 120, name)
    again = httpx.post(f"{base}/retrieve", headers=_auth(), timeout=60,
                       json={"index_name": "plant", "query": "when is the pump of line 4 restarted?"}).json()
    assert [r["doc_id"] for r in again["results"]][:1] == ["pump-4"]
