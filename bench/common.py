"""What the benchmarks share: the repository's paths, percentiles, /proc memory readings, a line on the
machine a run measured, the results file, and the packaged embedding model."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100, linear between samples: numpy's default); NaN for no samples."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


def status_kib(pid: int | str, field: str) -> int:
    """A ``/proc/<pid>/status`` memory figure (``VmRSS``, ``VmHWM``) in KiB; ``pid`` may be ``"self"``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_mib(pid: int | str, field: str = "VmRSS") -> float:
    """Resident memory (``VmRSS``) or its peak (``VmHWM``) in MiB."""
    return status_kib(pid, field) / 1024


def machine() -> str:
    """The machine a run measured, with its load: on a shared machine the figures move with it."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"


def write_result(path: Path, data: Any, indent: int = 2) -> Path:
    """Write one run's figures as JSON (bench/results/<name>.json by convention), creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent) + "\n")
    return path


def load_embedder():
    """The engine's default embedder, as ``ragengine serve`` builds it."""
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    return build_embedder(EngineSettings())
