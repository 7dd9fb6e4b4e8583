"""What the engine benchmarks share: percentiles, /proc readings, the embedding model."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def status_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` memory figure (``VmRSS``, ``VmHWM``) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def load_embedder():
    from ragengine.embedding import build_embedder
    from ragengine.settings import EngineSettings

    return build_embedder(EngineSettings())
