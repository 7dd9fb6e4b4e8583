"""The GPU engine image's dependencies, read from uv.lock as images/engine-gpu.Dockerfile installs them
(`uv sync --frozen --extra gpu --extra postgres --extra milvus`): one CUDA major, no faiss-gpu. Offline:
uv reads the lock only."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")


def export(*extras: str) -> dict[str, str]:
    args = [str(UV), "export", "--frozen", "--no-hashes", "--no-emit-project", "--no-dev", "-q"]
    for extra in extras:
        args += ["--extra", extra]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"UV_PROJECT_ENVIRONMENT": "/nonexistent", "PATH": "/usr/bin:/bin", "UV_OFFLINE": "1"}).stdout
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\n]+)", out, re.M))


def test_the_gpu_image_has_one_cuda_major_and_no_faiss_gpu():
    pins = export("gpu", "postgres", "milvus")
    assert pins["torch"] == "2.10.0"  # PyPI's last CUDA 12 torch (12.8)
    cuda = {name for name in pins if name.startswith(("nvidia-", "cuda-"))}
    assert cuda and all(name.endswith("-cu12") for name in cuda if name.startswith("nvidia-")), sorted(cuda)
    assert not any(re.search(r"cu13|^cuda-toolkit$", name) for name in cuda), sorted(cuda)
    assert pins["cuda-bindings"].startswith("12.")
    assert "faiss-cpu" in pins and not any(name.startswith("faiss-gpu") for name in pins)
    assert "kopf" not in pins  # the engine image carries no operator


def test_the_dockerfile_installs_exactly_the_lock():
    text = (ROOT / "images" / "engine-gpu.Dockerfile").read_text()
    assert "uv sync --frozen" in text and "--extra gpu" in text
    assert "RAGENGINE_DEVICE=auto" in text and not re.search(r"install[^\n]*faiss-gpu", text)
    assert "nvidia/cuda" not in text  # no CUDA base image: torch's wheels bring the runtime
