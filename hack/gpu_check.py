#!/usr/bin/env python3
"""The GPU checks of docs/gpu-checklist.md that fit a lent GPU machine (no network, no container
runtime, 64 MiB carried per call).

    python hack/gpu_check.py prepare .gpu     here: what the GPU machine cannot fetch, into .gpu/
    python3 hack/gpu_check.py run .gpu OUT    there (or here, on the CPU): the checks; a table, OUT/gpu-check.json

prepare writes the operator's rendered vLLM environment (vllm-env.json), the engine's packaged embedding
model in float16 (model/, ~45 MB: the float32 one does not fit the 64 MiB a call may carry), its float32
CPU embeddings of a fixed sample (reference.npy) and the wheels the engine's embedding code needs beyond
what the machine has (pydantic, pydantic-settings; whl/).

run reports the machine (GPU, driver, torch, the architectures torch was built for), then:
1. the non-root runtime: as uid 1000, which has no passwd entry there, with exactly the operator's vLLM
   environment, `getpass.getuser()` and a `torch.compile`d function on the GPU (inductor and triton
   write their caches where the operator points them);
2. the engine's embeddings on the device `RAGENGINE_DEVICE=auto` picks (the GPU there), against the
   float32 CPU reference (cosine), and their throughput next to the CPU's on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = [
    "How do I upgrade Debian to the next stable release?",
    "Barn owls hunt at night and eat mice and voles.",
    "KAITO provisions GPU nodes and serves models with vLLM on Kubernetes.",
    "def add(a, b):\n    return a + b  # adds two numbers",
    "Les réseaux de neurones apprennent des représentations vectorielles.",
    " ".join(["The package manager resolves dependencies and downloads archives from mirrors."] * 30),
]
# What the engine's settings need that the GPU machine's image lacks, at this venv's versions.
WHEELS = ("pydantic", "pydantic-core", "pydantic-settings", "annotated-types", "typing-inspection", "python-dotenv")
NONROOT = """
import getpass, os, torch
print("user", getpass.getuser(), "home", os.environ.get("HOME"))
f = torch.compile(lambda x: (x * 2).sin() + x.cos())
device = "cuda" if torch.cuda.is_available() else "cpu"
y = f(torch.arange(8, dtype=torch.float32, device=device))
print("compiled on", device, float(y.sum()))
print("caches", sorted(p for p in os.listdir(os.environ["HOME"])))
"""


def prepare(out: Path) -> None:
    sys.path[:0] = [str(ROOT / "engine"), str(ROOT / "operator")]
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from ragengine.embedding.core import resolve_model_path
    from ragengine.settings import DEFAULT_EMBEDDING_MODEL
    from ragengine_operator.manifests.inference import vllm_env

    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm-env.json").write_text(json.dumps({e["name"]: e["value"] for e in vllm_env()}, indent=1))
    model = SentenceTransformer(resolve_model_path(DEFAULT_EMBEDDING_MODEL), device="cpu")
    np.save(out / "reference.npy", model.encode(SAMPLE, normalize_embeddings=True, convert_to_numpy=True))
    model.half().save(str(out / "model"))
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d", str(out / "whl"),
                    *(f"{name}=={version(name)}" for name in WHEELS)], check=True)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {size / 2**20:.1f} MiB (a call carries at most 64 MiB, the working tree included)")


def machine() -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": None, "driver": None,
            "arch_flags": torch._C._cuda_getArchFlags() if torch.version.cuda else None}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        smi = shutil.which("nvidia-smi")
        if smi:
            info["driver"] = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True).stdout.strip()
    return info


def nonroot(prep: Path) -> dict:
    """As uid 1000 (no passwd entry on the GPU machine), with the operator's vLLM environment only."""
    env = json.loads((prep / "vllm-env.json").read_text())
    scratch = Path(tempfile.mkdtemp(prefix="vllm-cache-"))
    os.chown(scratch, 1000, 1000)
    env = {k: v.replace("/cache", str(scratch)) if v.startswith("/cache") else v for k, v in env.items()}
    env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), **{k: os.environ[k] for k in ("LD_LIBRARY_PATH",)
                                                              if k in os.environ})
    known = subprocess.run(["getent", "passwd", "1000"], capture_output=True, text=True).stdout.strip()
    try:
        proc = subprocess.run([sys.executable, "-c", NONROOT], env=env, user=1000, group=1000, extra_groups=[],
                              capture_output=True, text=True, timeout=600, cwd=scratch)
    except OSError as exc:  # e.g. this python is not readable by uid 1000 (a root-only venv)
        return {"uid_1000_in_passwd": bool(known), "rc": None, "stdout": "", "stderr_tail": f"{exc}"}
    return {"uid_1000_in_passwd": bool(known), "rc": proc.returncode, "stdout": proc.stdout.strip(),
            "stderr_tail": proc.stderr.strip()[-1500:]}


def embeddings(prep: Path) -> dict:
    sys.path.insert(0, str(ROOT / "engine"))
    import numpy as np

    from ragengine.embedding.core import pick_device
    from ragengine.embedding.torch_backend import TorchBackend

    device = pick_device("auto")
    ref = np.load(prep / "reference.npy")
    out = {"device": device}
    texts = [f"{SAMPLE[i % len(SAMPLE)]} ({i})" for i in range(2048)]
    for where in dict.fromkeys([device, "cpu"]):
        backend = TorchBackend(str(prep / "model"), where, None, 64, None)
        if where == "cpu":
            backend.model.float()  # float16 matmuls are slow on a CPU: compare with what the CPU would run
        batch = texts if where != "cpu" else texts[:256]
        got = backend.embed_documents(SAMPLE)
        out[f"{where}_min_cosine_vs_cpu_fp32"] = float(np.min(np.sum(got * ref, axis=1)))
        backend.embed_documents(batch[:64])  # warm-up
        t = time.perf_counter()
        backend.embed_documents(batch)
        out[f"{where}_texts_per_s"] = round(len(batch) / (time.perf_counter() - t), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare").add_argument("dir", type=Path)
    run = sub.add_parser("run")
    run.add_argument("dir", type=Path)
    run.add_argument("out", type=Path)
    opts = ap.parse_args()
    if opts.cmd == "prepare":
        prepare(opts.dir)
        return 0
    report = {"machine": machine(), "nonroot": nonroot(opts.dir), "embeddings": embeddings(opts.dir)}
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "gpu-check.json").write_text(json.dumps(report, indent=1))
    m, n, e = report["machine"], report["nonroot"], report["embeddings"]
    print(f"| GPU | {m['gpu']} (driver {m['driver']}), torch {m['torch']} CUDA {m['cuda']}, {m['arch_flags']} |")
    print(f"| non-root (uid 1000 in passwd: {n['uid_1000_in_passwd']}) | rc {n['rc']}: "
          f"{n['stdout'].splitlines()[:2] or n['stderr_tail'][-300:]} |")
    for key, value in e.items():
        print(f"| embeddings {key} | {value} |")
    return 0 if n["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
