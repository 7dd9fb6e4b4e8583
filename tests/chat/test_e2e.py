"""End to end through the full engine (create_app: real embedding model, real IndexRegistry).

The ``llm`` tests run the REAL SmolLM2-135M-Instruct model with llama-cpp-python's server on the CPU
(installed by hack/install-llm.sh, which ``make install`` runs). They fail, not skip, when it is
missing: a silently skipped real-model test is how a broken install goes unnoticed.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import openai
import pytest

from ragengine.app import create_app
from ragengine.settings import EngineSettings
from tests.support.embedding import serve_engine

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    {"text": "FAISS is a library for efficient similarity search and clustering of dense vectors.",
     "metadata": {"source": "faiss.md"}},
    {"text": "KAITO is a Kubernetes operator that automates the deployment of AI models on GPU nodes.",
     "metadata": {"source": "kaito.md"}},
    {"text": "The office cafeteria serves tomato soup every Tuesday at noon.", "metadata": {"source": "menu.md"}},
]
QUESTION = "Which library does similarity search of dense vectors?"
# Facts no model can know: the only way a planted token reaches an answer is through retrieval.
PLANTED = [
    {"text": "The maintenance password for the Vortex-9 cooling tower is KESTREL-4471.", "metadata": {"source": "vault.md"}},
    {"text": "The night shift supervisor at the Harbor Street depot is named Ottoline Brackwater.",
     "metadata": {"source": "staff.md"}},
]


@contextlib.contextmanager
def full_engine(tmp: Path, embedder, docs=DOCS, **settings):
    """The production app on the run's loaded embedding model, with ``docs`` in index 'docs'."""
    app = create_app(EngineSettings(data_dir=tmp, llm_retries=0, **settings))
    with serve_engine(app, embedder) as base:
        r = httpx.post(f"{base}/index", json={"index_name": "docs", "documents": docs}, timeout=120)
        assert r.status_code == 200, r.text
        yield base


@pytest.fixture(scope="module")
def engine_on_fake(llm_server, embedder, tmp_path_factory):
    _llm, url = llm_server
    # Threshold 0: the filter test scopes retrieval to an off-topic document on purpose.
    with full_engine(tmp_path_factory.mktemp("e2e-fake"), embedder, llm_url=url + "/v1", similarity_threshold=0.0) as base:
        yield base


def test_full_engine_rag_with_real_retrieval(engine_on_fake, fake_llm):
    r = httpx.post(f"{engine_on_fake}/v1/chat/completions", timeout=60,
                   json={"index_name": "docs", "messages": [{"role": "user", "content": QUESTION}]})
    assert r.status_code == 200, r.text
    body = r.json()
    top = body["source_nodes"][0]
    assert top["metadata"]["source"] == "faiss.md" and 0.0 <= top["score"] <= 1.0
    assert all(body["source_nodes"][i]["score"] >= 0 for i in range(len(body["source_nodes"])))
    system = fake_llm.last_chat()["messages"][0]["content"]
    assert DOCS[0]["text"] in system  # the retrieved chunk reached the prompt
    models = httpx.get(f"{engine_on_fake}/v1/models").json()["data"]
    assert "rag:docs" in [m["id"] for m in models]


def test_full_engine_unknown_index(engine_on_fake):
    r = httpx.post(f"{engine_on_fake}/v1/chat/completions",
                   json={"index_name": "nope", "messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 404 and r.json()["error"]["message"] == "No such index: 'nope' exists."


def test_full_engine_extractive_without_llm(tmp_path, embedder):
    with full_engine(tmp_path, embedder) as base:
        r = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                       json={"index_name": "docs", "messages": [{"role": "user", "content": QUESTION}]})
    body = r.json()
    assert body["generation_method"] == "extractive_fallback"
    assert body["choices"][0]["message"]["content"].startswith("FAISS is a library")


# --- the real model -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine_on_smollm2(smollm2_url, embedder, tmp_path_factory):
    with full_engine(tmp_path_factory.mktemp("e2e-smollm2"), embedder, DOCS + PLANTED, llm_url=smollm2_url,
                     context_window=2048) as base:
        yield base


@pytest.mark.llm
def test_smollm2_rag_answer(engine_on_smollm2):
    c = openai.OpenAI(base_url=f"{engine_on_smollm2}/v1", api_key="x", max_retries=0, timeout=120)
    out = c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": QUESTION}],
                                    temperature=0, max_tokens=48, extra_body={"index_name": "docs"})
    extra = out.model_extra
    assert extra["generation_method"] == "llm" and extra["rag"]["applied"] is True
    assert extra["rag"]["token_counter"] == "llama.cpp"  # exact counts from the served model's tokenizer
    assert extra["source_nodes"][0]["metadata"]["source"] == "faiss.md"
    assert out.choices[0].message.content.strip()  # a weak model: assert the plumbing, not the wording
    assert out.usage.completion_tokens <= 48 and out.choices[0].finish_reason in ("stop", "length")
    assert out.id.startswith("chatcmpl-")


@pytest.mark.llm
def test_smollm2_rag_stream(engine_on_smollm2):
    c = openai.OpenAI(base_url=f"{engine_on_smollm2}/v1", api_key="x", max_retries=0, timeout=120)
    chunks = list(c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": QUESTION}],
                                            temperature=0, max_tokens=32, stream=True,
                                            extra_body={"index_name": "docs"}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.strip() and len(chunks) > 3
    assert chunks[-1].model_extra["source_nodes"][0]["metadata"]["source"] == "faiss.md"


# --- the real model answers from the index -----------------------------------------------------------
# What a 135M model reliably does, at temperature 0: copies a short fact from its context. The checks are
# the planted token (not the wording), and the control without retrieval shows the token is not known.
VAULT = "What is the maintenance password for the Vortex-9 cooling tower?"


def smollm2_chat(base: str, question: str, **extra) -> dict:
    r = httpx.post(f"{base}/v1/chat/completions", timeout=300, json={
        "messages": [{"role": "user", "content": question}], "temperature": 0, "max_tokens": 96, **extra})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.llm
def test_smollm2_answers_from_a_fact_planted_in_the_index(engine_on_smollm2):
    body = smollm2_chat(engine_on_smollm2, VAULT, index_name="docs")
    assert body["rag"]["applied"] is True and body["generation_method"] == "llm"
    assert body["source_nodes"][0]["metadata"]["source"] == "vault.md"
    assert "KESTREL-4471" in body["choices"][0]["message"]["content"], body["choices"][0]["message"]["content"]


@pytest.mark.llm
def test_smollm2_does_not_know_the_planted_fact_without_retrieval(engine_on_smollm2):
    body = smollm2_chat(engine_on_smollm2, VAULT)  # no index_name: passed through, no context
    assert body["rag"]["reason"] == "no_index_name"
    assert "KESTREL" not in body["choices"][0]["message"]["content"]


@pytest.mark.llm
def test_smollm2_streams_an_answer_from_a_planted_fact(engine_on_smollm2):
    c = openai.OpenAI(base_url=f"{engine_on_smollm2}/v1", api_key="x", max_retries=0, timeout=300)
    chunks = list(c.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Who is the night shift supervisor at the Harbor Street depot?"}],
        temperature=0, max_tokens=96, stream=True, extra_body={"index_name": "docs"}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert "Brackwater" in text, text
    assert chunks[-1].model_extra["source_nodes"][0]["metadata"]["source"] == "staff.md"


@pytest.mark.llm
def test_smollm2_question_the_index_cannot_answer_gets_no_context(engine_on_smollm2):
    """Retrieval was asked for and nothing passed the similarity threshold: the no-context outcome, no
    sources, nothing of the index in the answer."""
    body = smollm2_chat(engine_on_smollm2, "How tall is Mount Everest?", index_name="docs")
    rag = body["rag"]
    assert (rag["applied"], rag["reason"], rag["selected"], rag["context_tokens"]) == (False, "no_context", 0, 0), rag
    assert not body.get("source_nodes")
    assert not any(word in body["choices"][0]["message"]["content"] for word in ("KESTREL", "Brackwater", "FAISS"))


@pytest.mark.llm
def test_smollm2_passthrough_and_models(engine_on_smollm2):
    models = httpx.get(f"{engine_on_smollm2}/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["smollm2", "rag:docs"]
    r = httpx.post(f"{engine_on_smollm2}/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 16, "temperature": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].strip()
    assert r.json()["rag"]["reason"] == "no_index_name"


def test_full_engine_scoped_by_filters(engine_on_fake, fake_llm):
    url = f"{engine_on_fake}/v1/chat/completions"
    r = httpx.post(url, timeout=60, json={"index_name": "docs", "messages": [{"role": "user", "content": QUESTION}],
                                          "filters": {"type": "eq", "key": "source", "value": "menu.md"}})
    assert r.status_code == 200, r.text
    assert {s["metadata"]["source"] for s in r.json()["source_nodes"]} == {"menu.md"}
    r = httpx.post(url, timeout=60, json={"index_name": "docs", "messages": [{"role": "user", "content": QUESTION}],
                                          "filters": {"type": "bogus"}})
    assert r.status_code == 400 and r.json()["error"]["message"]
