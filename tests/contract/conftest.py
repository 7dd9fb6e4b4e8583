"""Contract fixtures: one real engine process (and its test LLM) per run, seeded with an index, a session, a file.

This engine runs without access control (a laptop's): the published error bodies and parameter bounds are
checked here; the fuzz test (``test_fuzz.py``) starts an engine of its own, with access control on: what it
creates and deletes must not reach the other tests.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.engine_process import EngineProcess, engine_process

SEEDED_INDEX = "seeded"
SEEDED_STORE = "seeded-store"
SEEDED_DOCS = [
    {"doc_id": "doc-vectors", "text": "FAISS searches unit vectors by inner product.", "metadata": {"topic": "vectors"}},
    {"doc_id": "doc-journal", "text": "The journal is fsynced before a write is acknowledged.",
     "metadata": {"topic": "durability"}},
    {"doc_id": "doc-bm25", "text": "BM25 ranks documents by term frequency.", "metadata": {"topic": "keywords"}},
]

def seed_open_engine(base_url: str) -> dict[str, list[str]]:
    """Create what the routes act on: an index with documents, a session with a message, a thread and a file;
    a vector store with a file and a batch, and a stored response.

    Returns the ids by parameter name; the fuzzer uses one of them part of the time and a generated
    value otherwise, so it reaches the routes' logic past "404 not found" as well as the 404s.
    """
    with httpx.Client(base_url=base_url, timeout=120) as client:
        client.post("/index", json={"index_name": SEEDED_INDEX, "documents": SEEDED_DOCS}).raise_for_status()
        session = client.post("/v1/sessions", json={"title": "seeded", "index_name": SEEDED_INDEX}).json()["id"]
        posted = client.post(f"/v1/sessions/{session}/messages", json={"content": "What does FAISS search?"})
        posted.raise_for_status()
        message = posted.json()["user_message"]["id"]
        thread = client.post(f"/v1/sessions/{session}/threads", json={"parent_message_id": message}).json()["id"]
        upload = client.post("/v1/files", files={"file": ("notes.md", b"# Notes\n\nBM25 and FAISS.", "text/markdown")},
                             data={"session_id": session})
        upload.raise_for_status()
        # OpenAI's surface: a vector store (an index of its own, so deleting it spares the seeded index) with a
        # file in it, a file batch and a stored response
        store = client.post("/v1/vector_stores", json={"name": "seeded", "index_name": SEEDED_STORE})
        store.raise_for_status()
        vs_file = client.post("/v1/files", files={"file": ("faiss.md", b"FAISS searches unit vectors.", "text/markdown")},
                              data={"purpose": "assistants"})
        vs_file.raise_for_status()
        attached = client.post(f"/v1/vector_stores/{SEEDED_STORE}/files",
                               json={"file_id": vs_file.json()["id"], "attributes": {"topic": "vectors"}})
        attached.raise_for_status()
        batch = client.post(f"/v1/vector_stores/{SEEDED_STORE}/file_batches", json={"file_ids": [upload.json()["id"]]})
        batch.raise_for_status()
        response = client.post("/v1/responses", json={"input": "What does FAISS search?", "tools": [
            {"type": "file_search", "vector_store_ids": [SEEDED_STORE]}]})
        response.raise_for_status()
    return {"index_name": [SEEDED_INDEX], "doc_id": [d["doc_id"] for d in SEEDED_DOCS], "session_id": [session],
            "message_id": [message], "thread_id": [thread, "main"], "file_id": [upload.json()["id"], vs_file.json()["id"]],
            "vector_store_id": [SEEDED_STORE], "batch_id": [batch.json()["id"]], "response_id": [response.json()["id"]]}


@pytest.fixture(scope="session")
def engine(tmp_path_factory) -> EngineProcess:
    with engine_process(tmp_path_factory.mktemp("engine")) as proc:
        proc.known_ids = seed_open_engine(proc.base_url)
        yield proc
