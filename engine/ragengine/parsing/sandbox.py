"""The parent side of the bounded parser: one child process per file, budgets enforced by the kernel.

``parse(kind, data, limits)`` blocks until the child answers, is killed by its CPU-time rlimit, or
misses the wall-clock deadline (then it is killed here); each outcome becomes ``Parsed`` or
``Refused`` with a reason. Callers on an event loop run it in a bounded executor of their own.

The child gets a minimal environment (no API keys, database URLs or tokens of the parent), the
parent's ``ragengine`` on its path (so it runs the same code), ``/`` as its working directory and
no inherited descriptors but stdin / stdout / stderr. A fresh process per file (not a pool): an
rlimit on CPU time counts a process's whole life, and nothing a hostile file did to one parser can
touch the next file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import ragengine
from ragengine.parsing.limits import MEMORY, OVER_BUDGET, UNREADABLE, Parsed, ParseLimits, Refused

ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TESSDATA_PREFIX", "VIRTUAL_ENV", "PYTHONHOME")
# One thread per native library: the budget is one core's worth, and thread pools cost address space.
ENV_SET = {"OMP_THREAD_LIMIT": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
_CODE_ROOT = str(Path(ragengine.__file__).resolve().parents[1])


def child_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    path = [_CODE_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    env.update(ENV_SET)
    return env


def request(kind: str, data: bytes, limits: ParseLimits) -> bytes:
    return json.dumps({"kind": kind, "limits": limits.to_dict()}).encode() + b"\n" + data


def outcome(returncode: int, stdout: bytes, stderr: bytes, limits: ParseLimits) -> Parsed | Refused:
    """What the child's exit means (pure: tests feed it exit codes)."""
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return Refused(f"parsing needs more than {limits.cpu_s} s of CPU time (the limit)", over_limit=True,
                       code=OVER_BUDGET)
    if returncode == 0:
        try:
            answer = json.loads(stdout)
            if "parsed" in answer:
                return Parsed.from_dict(answer["parsed"])
            return Refused(str(answer["refused"]), bool(answer.get("over_limit")), str(answer.get("code") or UNREADABLE))
        except (ValueError, KeyError, TypeError):
            pass
    lines = [x for x in stderr.decode("utf-8", "replace").splitlines() if x.strip()]
    # An interpreter that runs out of memory at a bad moment aborts (Py_FatalError, e.g. "Cannot
    # recover from MemoryErrors while normalizing exceptions") instead of raising; its dump ends
    # with the list of extension modules, so the reason is the fatal line, not the last one.
    fatal = next((x.strip() for x in lines if x.startswith("Fatal Python error:")), None)
    if (any("MemoryError" in x for x in lines[-3:]) or (fatal is not None and "memory" in fatal.lower())
            or any("std::bad_alloc" in x for x in lines)):
        return Refused(f"parsing needs more than {limits.memory_mb} MiB of memory (the limit)", over_limit=True,
                       code=MEMORY)
    why = (fatal or lines[-1].strip())[:300] if lines else f"exit status {returncode}"
    return Refused(f"the parser failed on this file ({why})")


def parse(kind: str, data: bytes, limits: ParseLimits) -> Parsed | Refused:
    try:
        proc = subprocess.run([sys.executable, "-s", "-m", "ragengine.parsing.worker"], input=request(kind, data, limits),
                              capture_output=True, timeout=limits.deadline_s, env=child_env(), cwd="/")
    except subprocess.TimeoutExpired:  # run() has killed the child
        return Refused(f"parsing took longer than {limits.deadline_s:g} s (the limit)", over_limit=True,
                       code=OVER_BUDGET)
    return outcome(proc.returncode, proc.stdout, proc.stderr, limits)
