"""Chunk token counts stored at ingestion (``index.chunk_tokens``), on every vector store.

The counts are the served LLM's (the fake vLLM's ``/tokenize``, whose counts differ from the bytes/3
estimate), made once when the chunks are written and stored with them. A chat request over stored chunks
then asks the tokenizer for its prompt only, even in a restarted engine that has nothing in memory; a
different served model is a different key, so its chunks are counted again, exactly.
"""

from __future__ import annotations

import httpx
import pytest

from tests.llm_server import FakeLLM, create_llm_app, tokenize
from tests.support.server import serve_app

DOCS = [
    {"doc_id": "kaito", "text": "KAITO is a Kubernetes operator that automates AI model deployment.",
     "metadata": {"source": "kaito"}},
    {"doc_id": "gpu", "text": "KAITO provisions GPU nodes with Karpenter and runs vLLM for inference on them.",
     "metadata": {"source": "gpu"}},
    {"doc_id": "faiss", "text": "FAISS is a library for efficient similarity search of dense vectors.",
     "metadata": {"source": "faiss"}},
]
QUESTION = "What does KAITO do?"


@pytest.fixture(scope="module")
def llm():
    fake = FakeLLM()
    with serve_app(create_llm_app(fake)) as base:
        yield fake, base + "/v1"


def tokenized(fake: FakeLLM) -> list[str]:
    """What the engine sent to /tokenize: each plain text, or "<messages>" for a chat-template count."""
    return ["<messages>" if "messages" in r["body"] else r["body"]["prompt"]
            for r in fake.requests if r["path"] == "/tokenize"]


def chat(base: str) -> dict:
    r = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                   json={"index_name": "docs", "messages": [{"role": "user", "content": QUESTION}]})
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_over_stored_chunks_counts_only_the_prompt(make_server, llm, vector_store):
    fake, url = llm
    fake.model, fake.tokenize_enabled = "fake-llm", True
    settings = {"llm_url": url, "llm_retries": 0, "similarity_threshold": 0.0}
    with make_server(**settings) as (base, _app):
        fake.reset()
        r = httpx.post(f"{base}/index", json={"index_name": "docs", "documents": DOCS}, timeout=120)
        assert r.status_code == 200, r.text
        assert sorted(tokenized(fake)) == sorted(d["text"] for d in DOCS)  # counted once, at ingestion
        # A metadata-only update keeps the chunks, their vectors and their counts.
        r = httpx.post(f"{base}/indexes/docs/documents", timeout=60,
                       json={"documents": [{**DOCS[0], "metadata": {"source": "kaito", "rev": 2}}]})
        assert r.status_code == 200 and r.json()["updated_documents"], r.text
    with make_server(**settings) as (base, _app):  # restarted: no count in memory, only the stored ones
        fake.reset()
        body = chat(base)
        rag = body["rag"]
        assert rag["selected"] == len(DOCS) and rag["token_counter"] == "vllm"
        assert sorted(s["metadata"].get("rev", 1) for s in body["source_nodes"]) == [1, 1, 2]
        # counts stay inside (a source node carries its metadata and its citation, issue 44, never a count)
        assert all(set(s["metadata"]) <= {"source", "rev", "citation"} for s in body["source_nodes"]), body
        assert sorted(tokenized(fake)) == ["<messages>", QUESTION]  # the prompt and the query, no chunk
        assert rag["context_tokens"] == sum(len(tokenize(d["text"])) for d in DOCS)  # the LLM's counts, exact
    fake.model = "other-llm"  # another served model: the stored counts are not its own, counted again
    with make_server(**settings) as (base, _app):
        fake.reset()
        rag = chat(base)["rag"]
        assert sorted(tokenized(fake)) == sorted(["<messages>", QUESTION, *(d["text"] for d in DOCS)])
        assert rag["context_tokens"] == sum(len(tokenize(d["text"])) for d in DOCS)
    fake.model = "fake-llm"


def test_estimates_are_not_stored(make_server, llm, vector_store):
    """Without a tokenizer at ingestion nothing is stored; once one answers, chunks are counted by it."""
    fake, url = llm
    fake.model, fake.tokenize_enabled = "fake-llm", False
    settings = {"llm_url": url, "llm_retries": 0, "similarity_threshold": 0.0}
    with make_server(**settings) as (base, _app):
        r = httpx.post(f"{base}/index", json={"index_name": "docs", "documents": DOCS}, timeout=120)
        assert r.status_code == 200, r.text
    fake.tokenize_enabled = True
    with make_server(**settings) as (base, _app):
        fake.reset()
        rag = chat(base)["rag"]
        assert sorted(tokenized(fake)) == sorted(["<messages>", QUESTION, *(d["text"] for d in DOCS)])
        assert rag["context_tokens"] == sum(len(tokenize(d["text"])) for d in DOCS)
