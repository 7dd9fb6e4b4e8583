"""The engine as users run it: ``ragengine serve`` in its own process, with the vLLM-like test LLM beside it.

``with engine_process(tmp_dir) as engine:`` starts ``python -m tests.llm_server`` and
``python -m ragengine.cli serve`` (real uvicorn, the real packaged embedding model, FAISS under
``tmp_dir``), each on a port it binds itself (``--port 0``) and announces, waits for ``/health``,
yields an ``EngineProcess`` and stops both on exit (their logs are printed when start-up fails).
``engine_processes([dir_a, dir_b], settings=...)`` starts several at once (replicas on one external
store). ``wrap=["strace", ...]`` runs each engine under a command prefix (the fsync test);
``pid``/``process`` are then the wrapper's. Every test and benchmark that needs the engine as its
own process uses these: the contract tests, the Schemathesis fuzz run, the PostgreSQL end-to-end test,
durability (kill -9) and replica tests, and the engine, store and responsiveness benchmarks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.server import START_TIMEOUT_S, announced_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class EngineProcess:
    base_url: str
    llm_url: str
    data_dir: Path
    pid: int  # the engine's own process (under a wrapper: the wrapper's child), to kill -9 it
    process: subprocess.Popen  # what was started (the engine, or its wrapper); stopped on exit whatever its state
    known_ids: dict[str, list[str]] = field(default_factory=dict)  # what a test seeded, by parameter name


def engine_env(source: Path = REPO) -> dict[str, str]:
    """``source``'s engine first on the path (this checkout's, or another release's: tests/support/previous_release.py;
    never an installed copy), this checkout's operator and tests after it, everything offline."""
    env = dict(os.environ)
    paths = [str(source / "engine"), str(REPO / "operator"), str(REPO)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def _wait(url: str, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} during start-up:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready in time:\n{log.read_text()[-4000:]}")


def _child(proc: subprocess.Popen, log: Path, deadline: float) -> int:
    """The pid of the process a wrapper (strace) started: the one the wrapper's signals do not reach. Only once
    it runs the wrapped command: strace --seccomp-bpf first forks short-lived probes of itself, and a probe's
    pid, taken for the engine's, made the engine unreachable (its stop waited out both 30 s timeouts)."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    wrapper = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(OSError):
            for pid in children.read_text().split():
                if Path(f"/proc/{pid}/cmdline").read_bytes() not in (b"", wrapper):  # exec'd the wrapped command
                    return int(pid)
        time.sleep(0.01)
    raise TimeoutError(f"{proc.args!r} started no child")


def _stop(proc: subprocess.Popen, inner: int | None = None) -> None:
    """Stop ``proc``; a wrapper by stopping the process it runs (strace -o ignores SIGTERM itself)."""
    if inner is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(inner, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(inner, signal.SIGKILL)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def wait_healthy(engine: EngineProcess, timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until an engine yielded with ``wait_ready=False`` answers ``/health`` (its log if it exits)."""
    _wait(f"{engine.base_url}/health", engine.process, engine.data_dir.parent / "engine.log",
          time.monotonic() + timeout_s)


@contextlib.contextmanager
def engine_process(work_dir: Path, *, settings: dict[str, str] | None = None, llm: bool = True,
                   wrap: list[str] | None = None, start_timeout_s: float = START_TIMEOUT_S,
                   wait_ready: bool = True, source: Path = REPO, env: dict[str, str] | None = None,
                   exec_prefix: list[str] | None = None, module: str = "ragengine.cli") -> Iterator[EngineProcess]:
    """An engine process and its test LLM (none with ``llm=False``: a retrieval-only engine);
    ``settings`` are extra ``--set KEY=VALUE`` engine settings, ``env`` extra environment variables (the
    ``RAGENGINE_*`` settings as a pod passes them), ``exec_prefix`` a command that execs the engine in its
    own process (``setpriv``: the pid stays the engine's). ``wait_ready=False``: yielded once its port is
    bound, before it has started (a test of what it does meanwhile). ``source``: the checkout whose engine
    runs (another release's, with this venv's Python). ``module``: what ``python -m`` runs with ``serve ...``
    (a benchmark's wrapper of the CLI)."""
    with engine_processes([work_dir], settings=settings, llm=llm, wrap=wrap, start_timeout_s=start_timeout_s,
                          wait_ready=wait_ready, source=source, env=env, exec_prefix=exec_prefix,
                          module=module) as (engine,):
        yield engine


@contextlib.contextmanager
def engine_processes(work_dirs: list[Path], *, settings: dict[str, str] | None = None, llm: bool = True,
                     wrap: list[str] | None = None, start_timeout_s: float = START_TIMEOUT_S,
                     wait_ready: bool = True, source: Path = REPO, env: dict[str, str] | None = None,
                     exec_prefix: list[str] | None = None, module: str = "ragengine.cli") -> Iterator[list[EngineProcess]]:
    """One engine per work folder, all started before any is waited for (replicas start side by side),
    sharing one test LLM; each keeps its log and, for FAISS, its data under its own folder."""
    extra_env = env or {}
    env = engine_env(source)
    deadline = time.monotonic() + start_timeout_s
    procs: list[subprocess.Popen] = []
    inner: dict[int, int] = {}  # wrapper pid -> the engine's pid
    try:
        llm_url = ""
        if llm:
            work_dirs[0].mkdir(parents=True, exist_ok=True)
            llm_log = work_dirs[0] / "llm.log"
            with llm_log.open("wb") as out:
                procs.append(subprocess.Popen([sys.executable, "-m", "tests.llm_server", "--port", "0"],
                                              cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT))
            llm_url = f"http://127.0.0.1:{announced_port(llm_log, procs[0], timeout_s=60)}/v1"
            _wait(f"{llm_url}/models", procs[0], llm_log, time.monotonic() + 60)
        started = []
        for work_dir in work_dirs:
            work_dir.mkdir(parents=True, exist_ok=True)
            cmd = [*(wrap or []), *(exec_prefix or []), sys.executable, "-m", module, "serve",
                   "--host", "127.0.0.1", "--port", "0", "--data-dir", str(work_dir / "data"), "--log-level", "warning"]
            if llm_url:
                cmd += ["--llm-url", llm_url]
            for key, value in (settings or {}).items():
                cmd += ["--set", f"{key}={value}"]
            log = work_dir / "engine.log"
            offset = log.stat().st_size if log.exists() else 0
            with log.open("ab") as out:  # appended: a restarted engine keeps the earlier log
                procs.append(subprocess.Popen(cmd, cwd=REPO, env={**env, **extra_env}, stdout=out,
                                              stderr=subprocess.STDOUT))
            if wrap:
                inner[procs[-1].pid] = _child(procs[-1], log, deadline)
            started.append((work_dir, offset, procs[-1]))
        engines = []
        for work_dir, offset, proc in started:
            log = work_dir / "engine.log"
            port = announced_port(log, proc, offset=offset, timeout_s=max(1.0, deadline - time.monotonic()))
            base = f"http://127.0.0.1:{port}"
            if wait_ready:
                _wait(f"{base}/health", proc, log, deadline)
            engines.append(EngineProcess(base_url=base, llm_url=llm_url, data_dir=work_dir / "data",
                                         pid=inner.get(proc.pid, proc.pid), process=proc))
        yield engines
    finally:
        for proc in reversed(procs):
            _stop(proc, inner.get(proc.pid))
