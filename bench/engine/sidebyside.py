"""One workload, two RAG services: this engine and KAITO's RAG service, each as its users start it, against the
same fake LLM (tests/llm_server) on the same corpus (bench/engine/pydocs.py).

Each service alone, one after the other (``ingest``): seconds from exec to the first 200 from ``/health``, and
the passages through ``POST /index`` in batches of 100 (passages/s). Then, with both services up and paired so
that the machine's drift touches both alike: ``/retrieve`` (top 10) and RAG chat completions one at a time over
the FAQ's questions, the services taking turns block by block (client p50 / p99, ``one_client``); chat
completions from 16 concurrent clients, the services taking turns in blocks (requests/s, ``concurrent``);
each process's peak RSS (VmHWM) at the end. Chat requests name the served model (KAITO answers 500 without one) and
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

from bench.common import pct
from tests.support.engine_process import REPO, engine_env, engine_process
from tests.support.server import announced_port

CONCURRENCY = 16
PAIRED_BLOCK = 22  # questions per turn of a service in the paired single-client figures: 8 turns of the 176


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
def ours(work: Path, llm_url: str, settings: dict[str, str], source: Path = REPO) -> Iterator[Running]:
    """This engine, from ``source`` (a checkout: its ``engine/``)."""
    t0 = time.perf_counter()
    with engine_process(work, llm=False, settings={"llm_url": llm_url, **settings}, source=source) as engine:
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


def ingest(run: Running, passages: list[str]) -> dict:
    """Start-up and ingestion, measured with the service alone at work: both use every core."""
    with httpx.Client(base_url=run.base_url, timeout=600) as client:
        t = time.perf_counter()
        for start in range(0, len(passages), 100):
            client.post("/index", json={"index_name": "pydocs", "documents": [
                {"text": text} for text in passages[start:start + 100]]}).raise_for_status()
        elapsed = time.perf_counter() - t
    return {"startup_s": round(run.startup_s, 2), "ingest_passages_per_s": round(len(passages) / elapsed, 1)}


def chat_body(question: str, model: str) -> dict:
    return {"index_name": "pydocs", "model": model, "messages": [{"role": "user", "content": question}]}


def one_client(runs: dict[str, Running], questions: list[str], model: str) -> dict[str, dict]:
    """``/retrieve`` and chat p50 / p99 with one client, paired: the questions go in blocks of ``PAIRED_BLOCK``
    to every service in turn (the first service alternating), so a machine that slows down mid-run slows both
    alike. Run one after the other, the two services' single-request figures had moved by up to 1.4x between
    runs minutes apart. Blocks rather than single requests: what one service leaves running after its answer
    (a pool's threads spinning down, a collection) lands on the other's next request only once a block."""
    clients = {name: httpx.Client(base_url=run.base_url, timeout=600) for name, run in runs.items()}
    times: dict[str, dict[str, list[float]]] = {name: {"retrieve": [], "chat": []} for name in runs}

    def timed(name: str, path: str, body: dict) -> float:
        t = time.perf_counter()
        clients[name].post(path, json=body).raise_for_status()
        return (time.perf_counter() - t) * 1000

    def ask(kind: str, question: str) -> tuple[str, dict]:
        if kind == "retrieve":
            return "/retrieve", {"index_name": "pydocs", "query": question, "max_node_count": 10}
        return "/v1/chat/completions", chat_body(question, model)

    try:
        for question in questions[:10]:  # warm-up: first-use paths of both routes
            for name in runs:
                for kind in times[name]:
                    timed(name, *ask(kind, question))
        for kind in ("retrieve", "chat"):
            for block, start in enumerate(range(0, len(questions), PAIRED_BLOCK)):
                for name in (list(runs) if block % 2 == 0 else list(runs)[::-1]):
                    for question in questions[start:start + PAIRED_BLOCK]:
                        times[name][kind].append(timed(name, *ask(kind, question)))
    finally:
        for client in clients.values():
            client.close()
    return {name: {"retrieve_p50_ms": round(statistics.median(t["retrieve"]), 1),
                   "retrieve_p99_ms": round(pct(t["retrieve"], 99), 1),
                   "chat_p50_ms": round(statistics.median(t["chat"]), 1), "chat_p99_ms": round(pct(t["chat"], 99), 1)}
            for name, t in times.items()}


def concurrent(runs: dict[str, Running], questions: list[str], requests: int, model: str,
               rounds: int = 4) -> dict[str, float]:
    """Chat requests/s at ``CONCURRENCY`` clients: ``requests`` per service in ``rounds`` blocks, the services
    taking turns block by block (the first alternating), each service's rate over its own blocks' time."""
    bodies = [chat_body(questions[i % len(questions)], model) for i in range(requests)]
    cut = [bodies[i::rounds] for i in range(rounds)]
    spent = dict.fromkeys(runs, 0.0)
    for r, block in enumerate(cut):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            spent[name] += asyncio.run(_concurrent(runs[name].base_url, block, CONCURRENCY))
    return {name: round(requests / seconds, 1) for name, seconds in spent.items()}


async def _concurrent(base: str, bodies: list[dict], concurrency: int) -> float:
    """Seconds for ``concurrency`` clients to send ``bodies``."""
    queue = list(bodies)
    async with httpx.AsyncClient(base_url=base, timeout=600,
                                 limits=httpx.Limits(max_connections=concurrency * 2)) as client:
        async def worker() -> None:
            while queue:
                (await client.post("/v1/chat/completions", json=queue.pop())).raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start
