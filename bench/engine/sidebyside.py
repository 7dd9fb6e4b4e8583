"""One workload, two RAG services: this engine and KAITO's RAG service, each as its users start it, against the
same fake LLM (tests/llm_server) on the same corpus (bench/engine/pydocs.py).

Per service, in this order: seconds from exec to the first 200 from ``/health``; the passages through
``POST /index`` in batches of 100 (passages/s); ``/retrieve`` (top 10) and RAG chat completions one at a time
over the FAQ's questions (client p50 / p99); chat completions from 16 concurrent clients (requests/s); the
process's peak RSS (VmHWM) at the end. Chat requests name the served model (KAITO answers 500 without one) and
carry no ``max_tokens``: each service budgets the context from the LLM's window itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import pct, rss_mib
from tests.support.engine_process import REPO, engine_env, engine_process
from tests.support.server import announced_port

CONCURRENCY = 16


@dataclass
class Running:
    base_url: str
    pid: int
    startup_s: float


def _wait_health(base: str, proc: subprocess.Popen, log: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{base}/health not ready:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def fake_llm(work: Path, model: str) -> Iterator[str]:
    """The fake vLLM serving ``model``; yields its base URL (…/v1)."""
    log = work / "llm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.llm_server", "--port", "0", "--model", model],
                                cwd=REPO, env=engine_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{announced_port(log, proc, timeout_s=60)}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def ours(work: Path, llm_url: str, settings: dict[str, str]) -> Iterator[Running]:
    t0 = time.perf_counter()
    with engine_process(work, llm=False, settings={"llm_url": llm_url, **settings}) as engine:
        yield Running(engine.base_url, engine.pid, time.perf_counter() - t0)


@contextlib.contextmanager
def kaito(work: Path, llm_url: str, src: Path, python: Path, model_dir: str, tiktoken_cache: Path) -> Iterator[Running]:
    """KAITO's service as its image runs it (``uvicorn main:app``, asyncio loop, FAISS), configured through its
    environment: the LLM's chat URL and window, the local embedding model, a persist folder."""
    port = _free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TIKTOKEN_CACHE_DIR": str(tiktoken_cache),
           "PYTHONPATH": f"{src}:{src / 'ragengine'}", "LLM_INFERENCE_URL": f"{llm_url}/chat/completions",
           "LLM_CONTEXT_WINDOW": "4096", "LOCAL_EMBEDDING_MODEL_ID": model_dir,
           "DEFAULT_VECTOR_DB_PERSIST_DIR": str(work / "storage")}
    log = work / "kaito.log"
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen([str(python), "-m", "uvicorn", "main:app", "--host", "127.0.0.1", "--port", str(port),
                                 "--loop", "asyncio", "--log-level", "warning"],
                                cwd=src / "ragengine", env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_health(base, proc, log)
        yield Running(base, proc.pid, time.perf_counter() - t0)
    except Exception:
        print(f"KAITO's log (the end):\n{log.read_text(errors='replace')[-4000:]}", file=sys.stderr)
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload(run: Running, passages: list[str], questions: list[str], c16_requests: int, model: str) -> dict:
    out: dict = {"startup_s": round(run.startup_s, 2)}
    with httpx.Client(base_url=run.base_url, timeout=600) as client:
        t = time.perf_counter()
        for start in range(0, len(passages), 100):
            client.post("/index", json={"index_name": "pydocs", "documents": [
                {"text": text} for text in passages[start:start + 100]]}).raise_for_status()
        out["ingest_passages_per_s"] = round(len(passages) / (time.perf_counter() - t), 1)

        def timed(path: str, body: dict) -> float:
            t = time.perf_counter()
            client.post(path, json=body).raise_for_status()
            return (time.perf_counter() - t) * 1000

        def chat_body(q: str) -> dict:
            return {"index_name": "pydocs", "model": model, "messages": [{"role": "user", "content": q}]}

        for q in questions[:10]:  # warm-up: first-use paths of both routes
            timed("/retrieve", {"index_name": "pydocs", "query": q, "max_node_count": 10})
            timed("/v1/chat/completions", chat_body(q))
        retrieve = [timed("/retrieve", {"index_name": "pydocs", "query": q, "max_node_count": 10}) for q in questions]
        chat = [timed("/v1/chat/completions", chat_body(q)) for q in questions]
    out.update(retrieve_p50_ms=round(statistics.median(retrieve), 1), retrieve_p99_ms=round(pct(retrieve, 99), 1),
               chat_p50_ms=round(statistics.median(chat), 1), chat_p99_ms=round(pct(chat, 99), 1))
    bodies = [chat_body(questions[i % len(questions)]) for i in range(c16_requests)]
    out["chat_c16_rps"] = round(asyncio.run(_concurrent(run.base_url, bodies, CONCURRENCY)), 1)
    out["peak_rss_mib"] = round(rss_mib(run.pid, "VmHWM"))
    return out


async def _concurrent(base: str, bodies: list[dict], concurrency: int) -> float:
    queue = list(bodies)
    async with httpx.AsyncClient(base_url=base, timeout=600,
                                 limits=httpx.Limits(max_connections=concurrency * 2)) as client:
        async def worker() -> None:
            while queue:
                (await client.post("/v1/chat/completions", json=queue.pop())).raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(bodies) / (time.perf_counter() - start)
