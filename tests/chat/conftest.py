"""Fixtures for chat tests: the fake vLLM (tests/llm_server) and engines served by real uvicorn."""

from __future__ import annotations

import contextlib
import dataclasses
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
from fastapi import FastAPI

from ragengine.api import chat as chat_api
from ragengine.errors import NotFound, install_error_handlers
from ragengine.index.types import RetrievedNode
from ragengine.settings import EngineSettings
from tests.llm_server import FakeLLM, create_llm_app, tokenize
from tests.support.server import free_port, serve_app

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

    async def retrieve(self, index_name, query, top_k, *, filters=None, metadata_filter=None, query_embedding=None):
        if index_name not in self.indexes:
            raise NotFound(f"No such index: '{index_name}' exists.")
        self.calls.append({"index_name": index_name, "query": query, "top_k": top_k, "filters": filters,
                           "metadata_filter": metadata_filter})
        return self.indexes[index_name][:top_k]


def default_registry() -> FakeRegistry:
    return FakeRegistry({"docs": [node(*d) for d in DOCS]})


def chat_app(settings: EngineSettings, registry) -> FastAPI:
    """The engine's chat part alone (the full create_app is exercised in test_e2e_*)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async with AsyncExitStack() as stack:
            app.state.registry = registry
            await chat_api.startup(app, settings, stack)
            yield

    app = FastAPI(lifespan=lifespan)
    app.state.settings = settings
    install_error_handlers(app, settings)
    app.include_router(chat_api.router)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return app


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


@pytest.fixture
def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there


@pytest.fixture
def engine(llm_url, tmp_path):
    """``engine(**settings) -> base URL``; defaults: the fake LLM, the fixed 'docs' index."""
    stack = contextlib.ExitStack()

    def start(registry=None, **overrides) -> str:
        values = {"llm_url": llm_url, "llm_retries": 0, "data_dir": tmp_path / "data", **overrides}
        settings = EngineSettings(**values)
        app = chat_app(settings, registry or default_registry())
        start.app = app
        return stack.enter_context(serve_app(app))

    with stack:
        yield start


def tokens(text: str) -> int:
    return len(tokenize(text))
