"""End to end through the full engine (create_app: real embedding model, real IndexRegistry).

The ``llm`` tests run the REAL SmolLM2-135M-Instruct model with llama-cpp-python's server on the CPU
(installed by hack/install-llm.sh, which ``make install`` runs). They fail, not skip, when it is
missing: a silently skipped real-model test is how a broken install goes unnoticed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import openai
import pytest

from ragengine.app import create_app
from ragengine.settings import EngineSettings
from tests.support.server import free_port, serve_app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    {"text": "FAISS is a library for efficient similarity search and clustering of dense vectors.",
     "metadata": {"source": "faiss.md"}},
    {"text": "KAITO is a Kubernetes operator that automates the deployment of AI models on GPU nodes.",
     "metadata": {"source": "kaito.md"}},
    {"text": "The office cafeteria serves tomato soup every Tuesday at noon.", "metadata": {"source": "menu.md"}},
]
QUESTION = "Which library does similarity search of dense vectors?"


@contextlib.contextmanager
def full_engine(tmp: Path, **settings):
    app = create_app(EngineSettings(data_dir=tmp, llm_retries=0, **settings))
    with serve_app(app) as base:
        r = httpx.post(f"{base}/index", json={"index_name": "docs", "documents": DOCS}, timeout=120)
        assert r.status_code == 200, r.text
        yield base


@pytest.fixture(scope="module")
def engine_on_fake(llm_server, tmp_path_factory):
    _llm, url = llm_server
    # Threshold 0: the filter test scopes retrieval to an off-topic document on purpose.
    with full_engine(tmp_path_factory.mktemp("e2e-fake"), llm_url=url + "/v1", similarity_threshold=0.0) as base:
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


def test_full_engine_extractive_without_llm(tmp_path):
    with full_engine(tmp_path) as base:
        r = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                       json={"index_name": "docs", "messages": [{"role": "user", "content": QUESTION}]})
    body = r.json()
    assert body["generation_method"] == "extractive_fallback"
    assert body["choices"][0]["message"]["content"].startswith("FAISS is a library")


# --- the real model -----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def smollm2_url():
    check = subprocess.run([str(ROOT / "hack/serve-llm.sh"), "--check"], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.fail("SmolLM2 is not installed: run hack/install-llm.sh (make install does). " + check.stderr)
    port = free_port()
    env = {**os.environ, "LLM_PORT": str(port), "LLM_N_CTX": "2048", "HF_HUB_OFFLINE": "1"}
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by the fixture's teardown; not a pipe: llama.cpp logs a lot and a full pipe blocks it
    proc = subprocess.Popen([str(ROOT / "hack/serve-llm.sh")], env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {log.read()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not start within 90 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def engine_on_smollm2(smollm2_url, tmp_path_factory):
    with full_engine(tmp_path_factory.mktemp("e2e-smollm2"), llm_url=smollm2_url, context_window=2048) as base:
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
