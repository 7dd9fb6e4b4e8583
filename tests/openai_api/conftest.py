"""Fixtures for OpenAI's Files, Vector Stores and Responses driven by the official ``openai`` SDK.

One engine per vector store (FAISS, PostgreSQL + pgvector, Milvus Lite; the root conftest's
``vector_store`` parametrisation), started once per run on real uvicorn with the fake vLLM
(``tests/llm_server``) and shared: every test makes its own vector stores and files. On PostgreSQL the
session store (uploads, the vector store catalog, stored responses) is in PostgreSQL too, so the
catalog's job claims run on both databases.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import time
from dataclasses import dataclass

import openai
import psycopg
import pytest
from fastapi import FastAPI

from ragengine.app import create_app
from ragengine.settings import EngineSettings
from tests.chat import conftest as chat_fixtures
from tests.llm_server import FakeLLM
from tests.support.embedding import borrowed
from tests.support.server import serve_app
from tests.support.stores import store_values

API_KEY = "openai-tests-key-0123456789"
_names = itertools.count()

KAITO = ("kaito.md", "KAITO is a Kubernetes operator that automates AI model deployment. KAITO provisions GPU "
                     "nodes with Karpenter and runs vLLM for inference on them.")
SOUP = ("soup.txt", "The cafeteria serves mushroom soup on Tuesdays and lentil soup on Fridays.")
FAISS = ("faiss.txt", "FAISS is a library for efficient similarity search and clustering of dense vectors.")


# The chat tests' fake vLLM: one server for the run, back to its defaults for each test.
llm_server = chat_fixtures.llm_server
fake_llm = chat_fixtures.fake_llm


@dataclass
class Engine:
    base: str
    app: FastAPI
    llm: FakeLLM
    store: str

    def client(self, **kwargs) -> openai.OpenAI:
        """What an app written for OpenAI builds, with this engine's base_url (and key)."""
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key=API_KEY, max_retries=0, timeout=120, **kwargs)


def _database(admin_url: str) -> str:
    name = f"openai_{os.getpid()}_{next(_names)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="session")
def openai_engines(llm_server, embedder, tmp_path_factory, request):
    """``get(store) -> (base, app)``: one engine per vector store for the run."""
    stack = contextlib.ExitStack()
    running: dict[str, tuple[str, FastAPI]] = {}

    def get(store: str) -> tuple[str, FastAPI]:
        if store not in running:
            work = tmp_path_factory.mktemp(f"openai-{store}")
            pg = lambda: request.getfixturevalue("pgvector_url")  # noqa: E731  (started on first use)
            values = store_values(store, prefix=f"oa{os.getpid()}_{next(_names)}", work_dir=work, pg_url=pg)
            if store == "postgres":
                values["database_url"] = _database(pg())
            settings = EngineSettings(data_dir=work / "data", llm_url=llm_server[1] + "/v1", llm_retries=0,
                                      api_key=API_KEY, **values)
            app = create_app(settings)
            app.state.embedder = stack.enter_context(borrowed(embedder))
            running[store] = (stack.enter_context(serve_app(app)), app)
        return running[store]

    with stack:
        yield get


@pytest.fixture
def engine(openai_engines, fake_llm, vector_store) -> Engine:
    base, app = openai_engines(vector_store)
    return Engine(base, app, fake_llm, vector_store)


def upload(client: openai.OpenAI, store_id: str, doc: tuple[str, str], **attributes):
    """``upload_and_poll`` as an app calls it; returns the vector store file."""
    name, text = doc
    return client.vector_stores.files.upload_and_poll(vector_store_id=store_id, file=(name, io.BytesIO(text.encode())),
                                                      attributes=attributes or None, poll_interval_ms=50,
                                                      max_wait_seconds=120)


def new_store(client: openai.OpenAI, *docs: tuple[tuple[str, str], dict]):
    """A store with these (document, attributes) files, all completed; returns (store, {filename: file id})."""
    store = client.vector_stores.create(name=f"test store {next(_names)}")
    ids = {}
    for doc, attributes in docs:
        vs_file = upload(client, store.id, doc, **attributes)
        assert vs_file.status == "completed", vs_file
        ids[doc[0]] = vs_file.id
    return store, ids


def wait_for(condition, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value
