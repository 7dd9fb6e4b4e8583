"""The parent side of the bounded parser: one child process per file, budgets enforced by the kernel.

``parse(kind, data, limits)`` blocks until the child answers, is killed by its CPU-time rlimit, or
misses the wall-clock deadline (then it is killed here); each outcome becomes ``Parsed`` or
``Refused`` with a reason. Callers on an event loop run it in a bounded executor of their own.

The child gets a minimal environment (no API keys, database URLs or tokens of the parent), the
parent's ``ragengine`` on its path (so it runs the same code), ``/`` as its working directory, a
temporary folder of its own (``TMPDIR``, removed afterwards) and no inherited descriptors but stdin /
stdout / stderr; it confines itself before it reads the file (``confine.py``: no network, no file of the
engine's, no signal to it; the engine itself is not dumpable, so its ``/proc/<pid>/environ`` stays closed).
A fresh process per file (not a pool): an rlimit on CPU time counts a process's whole life, and nothing a
hostile file did to one parser can touch the next file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import ragengine
from ragengine.parsing.limits import MEMORY, OVER_BUDGET, UNREADABLE, Parsed, ParseLimits, Refused

ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TESSDATA_PREFIX", "VIRTUAL_ENV", "PYTHONHOME")
# One thread per native library: the budget is one core's worth, and thread pools cost address space.
ENV_SET = {"OMP_THREAD_LIMIT": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
_CODE_ROOT = str(Path(ragengine.__file__).resolve().parents[1])
WORKER = ("-s", "-m", "ragengine.parsing.worker")
log = logging.getLogger(__name__)
_warned: set[str] = set()


def child_env(tmp: str | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    if tmp is not None:
        env["TMPDIR"] = tmp
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


def run_child(args: tuple[str, ...], stdin: bytes, timeout_s: float) -> subprocess.CompletedProcess:
    """One child as every parse runs it: this Python, the minimal environment, ``/``, a temporary folder of
    its own (created here, private to this uid, removed afterwards). Raises ``TimeoutExpired`` (killed)."""
    with tempfile.TemporaryDirectory(prefix="ragengine-parse-") as tmp:
        return subprocess.run([sys.executable, *args], input=stdin, capture_output=True, timeout=timeout_s,
                              env=child_env(tmp), cwd="/")


def _note(confined: object) -> None:
    """Log once what this kernel could not give the children (docs/documents.md)."""
    if not isinstance(confined, dict):
        return
    missing = [name for name, value in (("Landlock", confined.get("landlock")), ("seccomp", confined.get("seccomp")))
               if not value]
    for name in missing:
        if name not in _warned:
            _warned.add(name)
            log.warning("parser children run without %s (not available here): they are less confined "
                        "(docs/documents.md, 'The bounded parser')", name)


def parse(kind: str, data: bytes, limits: ParseLimits) -> Parsed | Refused:
    try:
        proc = run_child(WORKER, request(kind, data, limits), limits.deadline_s)
    except subprocess.TimeoutExpired:  # run() has killed the child
        return Refused(f"parsing took longer than {limits.deadline_s:g} s (the limit)", over_limit=True,
                       code=OVER_BUDGET)
    if proc.returncode == 0:
        with contextlib.suppress(ValueError, AttributeError):
            _note(json.loads(proc.stdout).get("confined"))
    return outcome(proc.returncode, proc.stdout, proc.stderr, limits)
