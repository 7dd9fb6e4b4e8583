"""The sync image (images/sync.Dockerfile), run with exactly the container of the sync Job the operator renders
(``manifests.sync_job.sync_job``; no cluster needed): its command, the request in its environment, the engine's
key from a Secret, a configMap source's ConfigMap mounted as files, uid 1000, a read-only root and /tmp as an
emptyDir. It must fetch a git repository (git is in this image, not the operator's), parse a PDF and a Word file
(the parsers too) and push them into a real engine (in process, FAISS, on the machine's address as a pod would
reach it); and carry neither kopf nor the Kubernetes client (the worker never talks to the API server).
"""

from __future__ import annotations

import json
import subprocess
import uuid

import httpx
import pytest

from ragengine_operator.manifests.labels import Owner
from ragengine_operator.manifests.sync_job import SyncPod, sync_job
from ragengine_operator.settings import OperatorSettings
from ragengine_operator.sources.protocol import CONTAINER, SyncRequest, decode_result
from ragengine_operator.sources.sync import SyncResult, policy_settings
from ragengine_operator.spec import SecretKeyRef
from ragengine_operator.spec.sources import Source
from tests.support import corpus, podman
from tests.support.embedding import borrowed
from tests.support.git_server import Repo, git_http_server
from tests.support.server import serve_app

from .test_engine_image import machine_ip

IMAGE = podman.local_image("sync")
ENGINE_KEY = "sync-image-engine-key-0123456789"
KEY_REF = SecretKeyRef(name="engine-auth", key="api-key")
PROBE = """
import importlib, json, shutil
out = {"git": bool(shutil.which("git"))}
for name in ("ragengine_operator.sources.worker", "docx", "pptx", "openpyxl", "pdfplumber", "kopf", "kubernetes",
             "fastapi", "faiss"):
    try:
        importlib.import_module(name)
        out[name] = True
    except ImportError:
        out[name] = False
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def host() -> str:
    podman.require_image(IMAGE)
    return machine_ip()


@pytest.fixture(scope="module")
def engine(embedder, host, tmp_path_factory):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    app = create_app(EngineSettings(data_dir=tmp_path_factory.mktemp("sync-image") / "data", api_key=ENGINE_KEY))
    with borrowed(embedder) as own:
        app.state.embedder = own
        with serve_app(app, host=host) as base:
            yield base


def run_sync(source: dict, engine: str, host: str, configmap: dict[str, str | bytes] | None = None) -> SyncResult:
    """One sync, as the operator's runner asks for it (syncer/runner.py ``prepare``), in its rendered Job container."""
    parsed = Source.model_validate(source)
    # the test servers listen on this machine's private address: allowed, as the node tests' chart does
    policy = policy_settings(OperatorSettings(sources_egress_allow=[f"{host}/32"]))
    request = SyncRequest("sync", parsed.name, parsed.index_name, engine,
                          parsed.model_dump(mode="json", by_alias=True, exclude_none=True), fetch_policy=policy,
                          configmap_revision="1" if configmap is not None else None)
    cm_name = parsed.config_map.name if parsed.config_map else None
    job = sync_job(Owner("team-a", "kb", str(uuid.uuid4())), request, SyncPod(IMAGE), api_key=KEY_REF,
                   configmap=cm_name)
    pod = job["spec"]["template"]["spec"]
    args = podman.run_args(pod, CONTAINER, name=f"sync-image-{uuid.uuid4().hex[:8]}", ports={}, detach=False,
                           secrets={(KEY_REF.name, KEY_REF.key): ENGINE_KEY},
                           mounts=podman.Mounts(config_maps={cm_name: configmap} if cm_name and configmap else {}))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = decode_result(lines[-1].removeprefix("RESULT "), request.urls)
    assert result is not None, lines[-1]
    return result


def held(engine: str, index: str = "docs") -> dict[str, str]:
    page = httpx.get(f"{engine}/indexes/{index}/documents", headers={"Authorization": f"Bearer {ENGINE_KEY}"},
                     params={"limit": 100, "max_text_length": 100_000}, timeout=60).json()
    return {d["doc_id"]: d["text"] for d in page["documents"]}


def test_the_rendered_job_runs_the_sync_images_worker():
    pod = sync_job(Owner("n", "r", "u"), SyncRequest("sync", "s", "i", "http://e"), SyncPod(IMAGE))["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == IMAGE and container["command"] == ["ragengine-operator", "sync-source"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsUser"] == 1000


def test_the_sync_image_has_git_and_the_parsers_and_no_kubernetes_client(host):
    proc = subprocess.run([podman.PODMAN, "run", "--rm", "--entrypoint", "python3", IMAGE, "-c", PROBE],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert {k for k, v in found.items() if v} == {"git", "ragengine_operator.sources.worker", "docx", "pptx",
                                                  "openpyxl", "pdfplumber"}, found


def test_a_git_source_with_a_pdf_syncs_from_the_job_container(engine, host, tmp_path):
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("runbook.md", "# Boiler runbook\n\nThe boiler pressure valve is inspected every Friday.\n")
    repo.write("prices.pdf", corpus.pdf_table_bytes())
    revision = repo.commit("runbook and price list")
    with git_http_server(root, host=host) as git:
        result = run_sync({"name": "handbook", "index": "docs", "git": {"url": f"{git}/docs.git", "paths": ["**/*"]}},
                          engine, host)
    assert result.ok and result.revision == revision and result.documents == 2, result
    docs = held(engine)
    assert "inspected every Friday" in docs["handbook:runbook.md"]
    assert all(cell in docs["handbook:prices.pdf"] for cell in corpus.TABLE[14]), docs["handbook:prices.pdf"][:500]


def test_a_configmap_source_with_a_word_file_syncs_from_the_job_container(engine, host):
    files: dict[str, str | bytes] = {"prices.docx": corpus.docx_bytes(),
                                     "heating.md": "# Heating\n\nThe heating is switched on below 12 degrees.\n"}
    result = run_sync({"name": "faq", "index": "docs", "configMap": {"name": "faq-files"}}, engine, host, files)
    assert result.ok and result.documents == 2, result
    docs = held(engine)
    assert "switched on below 12 degrees" in docs["faq:heating.md"]
    assert all(cell in docs["faq:prices.docx"] for cell in corpus.TABLE[27]), docs["faq:prices.docx"][:500]
