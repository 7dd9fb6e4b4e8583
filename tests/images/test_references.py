"""The image references users meet agree: the chart's values, the operator's own defaults, and the names
`make images` builds under a registry (docs/images.md); and what each image installs from uv.lock."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from ragengine_operator.manifests.labels import Owner
from ragengine_operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[2]


def _values() -> dict:
    return yaml.safe_load((ROOT / "charts" / "ragengine" / "values.yaml").read_text())


def _chart_app_version() -> str:
    return yaml.safe_load((ROOT / "charts" / "ragengine" / "Chart.yaml").read_text())["appVersion"]


def test_chart_defaults_are_the_operators_defaults():
    values, settings = _values(), OperatorSettings()
    assert values["defaults"]["engineImage"] == settings.engine_image == Owner("n", "r", "u").engine_image
    assert values["defaults"]["vllmImage"] == settings.vllm_image
    assert values["sync"]["image"] == settings.sync_image


def test_published_names_are_what_make_images_builds():
    names = subprocess.run(["bash", str(ROOT / "hack" / "images.sh"), "names"], capture_output=True, text=True,
                           check=True, env={"IMAGE_REGISTRY": "ghcr.io/ragengine", "IMAGE_TAG": _chart_app_version(),
                                            "PATH": "/usr/bin:/bin"}).stdout.split()
    values = _values()
    assert names == [OperatorSettings().engine_image, f"{values['image']['repository']}:{_chart_app_version()}",
                     values["sync"]["image"]]


def _locked(image: str) -> set[str]:
    """The packages of uv.lock an image's Dockerfile installs into its final environment (its `uv export` line)."""
    dockerfile = (ROOT / "images" / f"{image}.Dockerfile").read_text()
    line = next(x for x in dockerfile.splitlines() if "uv export" in x and f"-o /tmp/{image}.txt" in x)
    extras = re.findall(r"--extra (\S+)", line)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv") or "uv"
    out = subprocess.run([uv, "export", "-q", "--frozen", "--no-emit-project", "--no-hashes",
                          *(a for e in extras for a in ("--extra", e))],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {m.group(1).lower() for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", out, re.M)}


def test_each_image_installs_its_own_side_of_the_lock():
    """The document parsers are the engine's and the sync worker's, never the operator's (issue 49); the Kubernetes
    client is the operator's, never the sync worker's or the engine's."""
    # defusedxml is no parser of documents: S3's XML answers are read with it, by the operator and the worker
    parsers = {"pdfplumber", "pdfminer-six", "python-docx", "python-pptx", "openpyxl", "pillow", "lxml"}
    kube = {"kopf", "kubernetes"}
    engine, operator, sync = _locked("engine"), _locked("operator"), _locked("sync")
    assert parsers <= engine and parsers <= sync and {"defusedxml", "httpx-auth"} <= operator & sync
    assert not parsers & operator, parsers & operator
    assert kube <= operator and not kube & sync and not kube & engine
    assert "pathspec" in operator & sync and "fastapi" not in operator | sync
