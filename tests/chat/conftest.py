"""Fixtures for chat tests: the fake vLLM (tests/llm_server) and engines served by real uvicorn.

Every engine is the production app (``create_app``: bearer auth, body limit and metrics middleware,
conversations, the real IndexRegistry with FAISS + BM25 and the packaged embedding model, loaded once
per run), with a ``docs`` index made of ``DOCS`` through ``POST /index``. ``engine(registry=...)``
swaps in ``FakeRegistry`` (fixed scores) for the tests that need exact scores; each says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from ragengine.app import create_app
from ragengine.embedding import Embedder
from ragengine.errors import NotFound
from ragengine.index.types import RetrievedNode
from ragengine.settings import EngineSettings
from tests.llm_server import FakeLLM, create_llm_app, tokenize
from tests.support.embedding import borrowed
from tests.support.server import START_TIMEOUT_S, announced_port, refused_port, serve_app
from tests.support.stores import store_values

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ("kaito-1", "KAITO is a Kubernetes operator that automates AI model deployment.", 0.91),
    ("kaito-2", "KAITO provisions GPU nodes with Karpenter and runs vLLM for inference on them.", 0.83),
    ("faiss-1", "FAISS is a library for efficient similarity search of dense vectors.", 0.42),
    ("misc-1", "The cafeteria serves soup on Tuesdays.", 0.05),
]
# What reaches the prompt with the default similarity_threshold (0.3, docs/retrieval.md): misc-1 does not.
IN_CONTEXT = [d for d in DOCS if d[2] >= 0.3]


def node(doc_id: str, text: str, score: float) -> RetrievedNode:
    return RetrievedNode(doc_id=doc_id, node_id=f"{doc_id}-n0", text=text, score=score, metadata={"source": doc_id})


class FakeRegistry:
    """The core's IndexRegistry interface with fixed results (relevance order = list order)."""

    def __init__(self, indexes: dict[str, list[RetrievedNode]]) -> None:
        self.indexes = indexes
        self.calls: list[dict] = []

    def exists(self, name: str) -> bool:
        return name in self.indexes

    def names(self) -> list[str]:
        return list(self.indexes)

    def status(self) -> dict:  # what /health reads
        return {"corrupt": {}, "indexes": {name: len(nodes) for name, nodes in self.indexes.items()}}

    async def retrieve(self, index_name, query, top_k, *, filters=None, metadata_filter=None, query_embedding=None,
                       acl=None):
        if index_name not in self.indexes:
            raise NotFound(f"No such index: '{index_name}' exists.")
        self.calls.append({"index_name": index_name, "query": query, "top_k": top_k, "filters": filters,
                           "metadata_filter": metadata_filter, "acl": acl})
        return self.indexes[index_name][:top_k]


def default_registry() -> FakeRegistry:
    return FakeRegistry({"docs": [node(*d) for d in DOCS]})


def chat_app(settings: EngineSettings, registry=None, embedder: Embedder | None = None) -> FastAPI:
    """The app ``create_app`` builds; ``registry`` (a FakeRegistry) replaces the real index after start-up."""
    app = create_app(settings)
    if embedder is not None:
        app.state.embedder = embedder  # the startup uses it instead of loading the model again
    if registry is not None:
        real_lifespan = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(a: FastAPI):
            async with real_lifespan(a):
                a.state.registry = a.state.chat.registry = a.state.conversations.registry = registry
                yield

        app.router.lifespan_context = lifespan
    return app


@pytest.fixture(scope="session")
def embedding_model(embedder):
    """The packaged embedding model, loaded once for the whole run (the root conftest's)."""
    return embedder


def index_docs(base: str) -> None:
    documents = [{"doc_id": d, "text": t, "metadata": {"source": d}} for d, t, _ in DOCS]
    r = httpx.post(f"{base}/index", json={"index_name": "docs", "documents": documents}, timeout=120)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="session")
def llm_server():
    llm = FakeLLM()
    with serve_app(create_llm_app(llm)) as base:
        yield llm, base


@pytest.fixture
def fake_llm(llm_server) -> FakeLLM:
    """The session's fake LLM, back to its defaults with an empty request log."""
    llm, _ = llm_server
    for f in dataclasses.fields(FakeLLM):
        if f.name not in ("requests", "stream_events", "fail_next", "_lock"):
            setattr(llm, f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory())
    llm.reset()
    return llm


@pytest.fixture
def llm_url(llm_server, fake_llm) -> str:
    return llm_server[1] + "/v1"


@pytest.fixture(scope="session")
def dead_url() -> Iterator[str]:
    with refused_port() as port:  # held bound, never listening: refused for the whole run
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="session")
def engines(llm_server, embedding_model, tmp_path_factory, request):
    """Engines on the real index, started once per distinct settings and vector store, and shared: a chat
    request changes nothing in them (the 'docs' index is only read), so tests can share one as clients do."""
    stack = contextlib.ExitStack()
    running: dict[str, tuple[str, FastAPI]] = {}
    prefixes = itertools.count()

    def get(registry=None, llm_state=(), store="faiss", **values) -> tuple[str, FastAPI]:
        # The LLM client caches what it discovered (window, tokenizer): another served state, another engine.
        key = repr((sorted(values.items()), llm_state, store))
        if registry is None and key in running:
            return running[key]
        values.setdefault("data_dir", tmp_path_factory.mktemp("engine"))
        values = {**store_values(store, prefix=f"chat{os.getpid()}_{next(prefixes)}", work_dir=values["data_dir"],
                                 pg_url=lambda: request.getfixturevalue("pgvector_url")), **values}
        embedder = stack.enter_context(borrowed(embedding_model))
        app = chat_app(EngineSettings(**values), registry, embedder)
        base = stack.enter_context(serve_app(app))
        if registry is not None:
            return base, app  # a FakeRegistry holds the test's own call log: never shared
        index_docs(base)
        running[key] = (base, app)
        return base, app

    with stack:
        yield get


@pytest.fixture
def engine(llm_url, engines, fake_llm, vector_store):
    """``engine(**settings) -> base URL``; defaults: the fake LLM, the real 'docs' index in ``vector_store``
    (``registry=`` a FakeRegistry for exact scores). ``engine.app`` is the app of the last call."""

    def start(registry=None, **overrides) -> str:
        state = (fake_llm.model, fake_llm.max_model_len, fake_llm.tokenize_enabled)
        # similarity_threshold 0: these tests check which chunks reach the prompt and in what order, and
        # the packaged model scores 'faiss-1' and 'misc-1' below the default 0.3 for KAITO questions. The
        # threshold itself is tested in test_similarity_threshold (and measured in docs/retrieval.md).
        settings = {"llm_url": llm_url, "llm_retries": 0, "similarity_threshold": 0.0, **overrides}
        base, start.app = engines(registry, state, vector_store, **settings)
        return base

    return start


def tokens(text: str) -> int:
    return len(tokenize(text))


@pytest.fixture(scope="session")
def smollm2_url(tmp_path_factory):
    """The REAL SmolLM2-135M-Instruct served by llama-cpp-python on the CPU (hack/serve-llm.sh, as ``make run``
    starts it), once per run. Fails, never skips, when it is missing: a silently skipped real-model test is how
    a broken install goes unnoticed."""
    check = subprocess.run([str(ROOT / "hack/serve-llm.sh"), "--check"], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.fail("SmolLM2 is not installed: run hack/install-llm.sh (make install does). " + check.stderr)
    # Port 0: llama_cpp.server's uvicorn binds a free port and logs it ("Uvicorn running on URL").
    env = {**os.environ, "LLM_PORT": "0", "LLM_N_CTX": "2048", "HF_HUB_OFFLINE": "1"}
    log = tmp_path_factory.mktemp("smollm2") / "server.log"  # a file, not a pipe: llama.cpp logs a lot
    with log.open("wb") as out:
        proc = subprocess.Popen([str(ROOT / "hack/serve-llm.sh")], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{announced_port(log, proc, timeout_s=START_TIMEOUT_S)}/v1"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer within {START_TIMEOUT_S} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
