"""Checks that work stays bounded, without timing assertions.

- ``run_under_cpu_limit``: a snippet of Python in a child process under a CPU-time limit (RLIMIT_CPU):
  linear code passes with a huge margin, and code that blows up (quadratic, exponential) is killed by the
  kernel at the limit, which the caller sees as a non-zero exit. CPU time, not wall time, so a busy machine
  does not make it flaky.
- ``within(seconds, work)``: fail (not hang) when ``work`` has not returned after a limit that only a call
  without a deadline gets near.
- ``reset_peak()`` / ``peak_kib()``: this process's peak resident set (``VmHWM``), reset to the current one
  (Linux ``clear_refs``), for "the attack grew memory by at most ...".
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_under_cpu_limit(code: str, cpu_s: int, *, wall_s: float = 600) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(ROOT / "operator"), str(ROOT),
                                                         os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], preexec_fn=limit, capture_output=True, text=True,
                          timeout=wall_s, env=env)


def within(seconds: float, work: Callable[[], Any], what: str = "the call has no deadline") -> Any:
    """Run ``work`` in a thread; fail (not hang) if it has not returned after ``seconds``."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds:g} s: {what}", pytrace=False)
    if "error" in box:
        raise box["error"]
    return box["value"]


def peak_kib() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))  # type: ignore[union-attr]


def reset_peak() -> int:
    Path("/proc/self/clear_refs").write_text("5")  # the peak becomes the current resident set
    return peak_kib()
