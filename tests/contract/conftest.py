"""Contract fixtures: one real engine process (and its test LLM) for the whole module, with a seeded index."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx
import pytest

from tests.support.engine_process import EngineProcess, engine_process

SEEDED_INDEX = "seeded"
SEEDED_DOCS = [
    {"doc_id": "doc-vectors", "text": "FAISS searches unit vectors by inner product.", "metadata": {"topic": "vectors"}},
    {"doc_id": "doc-journal", "text": "The journal is fsynced before a write is acknowledged.",
     "metadata": {"topic": "durability"}},
    {"doc_id": "doc-bm25", "text": "BM25 ranks documents by term frequency.", "metadata": {"topic": "keywords"}},
]


def seed(base_url: str) -> None:
    """The index the fuzzer's document routes reach (``index_name`` is bound to it part of the time)."""
    resp = httpx.post(f"{base_url}/index", json={"index_name": SEEDED_INDEX, "documents": SEEDED_DOCS}, timeout=120)
    resp.raise_for_status()


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EngineProcess:
    with engine_process(tmp_path_factory.mktemp("engine")) as proc:
        seed(proc.base_url)
        yield proc
