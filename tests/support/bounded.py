"""Run a snippet of Python in a child process under a CPU-time limit (RLIMIT_CPU).

For tests of "this finishes promptly" without a timing assertion: linear code passes with a huge
margin, and code that blows up (quadratic, exponential) is killed by the kernel at the limit, which
the caller sees as a non-zero exit. CPU time, not wall time, so a busy machine does not make it flaky.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_under_cpu_limit(code: str, cpu_s: int, *, wall_s: float = 600) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(ROOT / "operator"), str(ROOT),
                                                         os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], preexec_fn=limit, capture_output=True, text=True,
                          timeout=wall_s, env=env)
