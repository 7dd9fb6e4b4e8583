"""The engine as users run it: ``ragengine serve`` in its own process, with the vLLM-like test LLM beside it.

``with engine_process(tmp_dir) as engine:`` starts ``python -m tests.llm_server`` and
``python -m ragengine.cli serve`` (real uvicorn, the real packaged embedding model, FAISS under
``tmp_dir``) on free ports, waits for ``/health``, yields an ``EngineProcess`` and stops both on exit
(their logs are printed when start-up fails). Used by the contract tests, the Schemathesis fuzz
run and the PostgreSQL end-to-end test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class EngineProcess:
    base_url: str
    llm_url: str
    data_dir: Path
    pid: int
    known_ids: dict[str, list[str]] = field(default_factory=dict)  # what a test seeded, by parameter name


def _env() -> dict[str, str]:
    """This checkout's packages first on the path (never an installed copy), everything offline."""
    env = dict(os.environ)
    paths = [str(REPO / "engine"), str(REPO / "operator"), str(REPO)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} during start-up:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout_s} s:\n{log.read_text()[-4000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def engine_process(work_dir: Path, *, settings: dict[str, str] | None = None, llm: bool = True,
                   start_timeout_s: float = 600.0) -> Iterator[EngineProcess]:
    """An engine process and its test LLM (none with ``llm=False``: a retrieval-only engine);
    ``settings`` are extra ``--set KEY=VALUE`` engine settings."""
    work_dir.mkdir(parents=True, exist_ok=True)
    env = _env()
    llm_port, port = free_port(), free_port()
    llm_log, engine_log = work_dir / "llm.log", work_dir / "engine.log"
    procs: list[subprocess.Popen] = []
    try:
        cmd = [sys.executable, "-m", "ragengine.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--data-dir", str(work_dir / "data"), "--log-level", "warning"]
        llm_url = ""
        if llm:
            with llm_log.open("wb") as out:
                procs.append(subprocess.Popen([sys.executable, "-m", "tests.llm_server", "--port", str(llm_port)],
                                              cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT))
            llm_url = f"http://127.0.0.1:{llm_port}/v1"
            _wait(f"{llm_url}/models", procs[0], llm_log, 60)
            cmd += ["--llm-url", llm_url]
        for key, value in (settings or {}).items():
            cmd += ["--set", f"{key}={value}"]
        with engine_log.open("wb") as out:
            procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{port}"
        _wait(f"{base}/health", procs[-1], engine_log, start_timeout_s)
        yield EngineProcess(base_url=base, llm_url=llm_url, data_dir=work_dir / "data", pid=procs[-1].pid)
    finally:
        for proc in reversed(procs):
            _stop(proc)
