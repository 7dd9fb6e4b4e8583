"""Ingestion: the engine's POST /index against the raw embedding backend, torch fp32 and thread counts."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from bench.engine.synth import passages


def bench_ingest(emb, n: int) -> dict:
    """Engine POST /index (chunk + embed + journal fsync + FAISS + BM25) vs model.encode on the same chunks."""
    from ragengine.app import create_app
    from ragengine.index.chunking import Chunker
    from ragengine.index.types import ChunkingConfig
    from ragengine.settings import EngineSettings
    from tests.support.server import serve_app

    texts = passages(n, words=(60, 160), seed=5)  # 1-2 chunks each at the 254-token default
    chunker = Chunker(emb, ChunkingConfig())
    chunks = []
    for text in texts:
        for span in chunker.split(text, {}):
            chunks.append(span if isinstance(span, str) else text[span[0]:span[1]])
    bs = 64
    backend = emb.backend
    n_tokens = sum(min(len(emb.token_ids(c)) + 2, emb.max_tokens) for c in chunks)  # what the model sees

    def raw() -> float:  # the backend alone on exactly the chunks the engine will embed
        t = time.perf_counter()
        backend.embed_documents(chunks)
        return len(chunks) / (time.perf_counter() - t)

    backend.embed_documents(chunks[:bs])  # warm-up
    raw_runs, engine_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        settings = EngineSettings(data_dir=Path(tmp), embedding_batch_size=bs)
        app = create_app(settings)
        app.state.embedder = emb
        with serve_app(app) as base, httpx.Client(base_url=base, timeout=600) as client:
            # Interleaved, best of two each: the machine is shared, so take each side's least-disturbed run.
            for run in range(2):
                raw_runs.append(raw())
                name = f"ingest-{run}"
                t = time.perf_counter()
                for start in range(0, n, 256):
                    r = client.post("/index", json={"index_name": name,
                                                    "documents": [{"text": x} for x in texts[start : start + 256]]})
                    r.raise_for_status()
                elapsed = time.perf_counter() - t
                stored = client.get("/health").json()["indexes"][name]["chunks"]
                assert stored == len(chunks), (stored, len(chunks))
                engine_runs.append(stored / elapsed)
    engine, raw_rate = max(engine_runs), max(raw_runs)
    out = {"documents": n, "chunks": len(chunks), "backend": backend.name, "engine_chunks_per_s": engine,
           "raw_model_chunks_per_s": raw_rate, "raw_runs": raw_runs, "engine_runs": engine_runs,
           "ratio": engine / raw_rate, "target_ratio": 0.9, "tokens": n_tokens,
           "engine_tokens_per_s": engine * n_tokens / len(chunks), "raw_tokens_per_s": raw_rate * n_tokens / len(chunks)}
    out.update(torch_and_threads(chunks, n_tokens, bs))
    out["vs_torch"] = out["engine_tokens_per_s"] / out["torch_fp32_tokens_per_s"]
    return out


def torch_and_threads(chunks: list[str], n_tokens: int, bs: int) -> dict:
    """The torch fp32 model's own tokens/s on the same chunks (sentence-transformers encode), and the
    export runtimes (ONNX Runtime fp32; OpenVINO f32 and at its own precision, bf16 where the CPU has it)
    at 1 thread and at every core, interleaved best of two (the machine may be shared)."""
    from ragengine.embedding.core import resolve_model_path
    from ragengine.embedding.export import find_onnx
    from ragengine.embedding.exported import cpu_threads
    from ragengine.embedding.torch_backend import TorchBackend
    from ragengine.settings import DEFAULT_EMBEDDING_MODEL

    runners: dict = {"torch_fp32": TorchBackend(resolve_model_path(DEFAULT_EMBEDDING_MODEL), "cpu", None, bs, None)}
    found = find_onnx(DEFAULT_EMBEDDING_MODEL)
    if found:
        from ragengine.embedding.onnx_backend import OnnxBackend
        from ragengine.embedding.openvino_backend import OpenVinoBackend

        for threads in sorted({1, cpu_threads()}):
            runners[f"onnx_{threads}_threads"] = OnnxBackend(found[0], found[1], bs, threads=threads)
            auto = OpenVinoBackend(found[0], found[1], bs, threads=threads)
            runners[f"openvino_{auto.precision}_{threads}_threads"] = auto
            if auto.precision != "f32":
                runners[f"openvino_f32_{threads}_threads"] = OpenVinoBackend(found[0], found[1], bs, threads, "f32")
    best: dict[str, float] = {}
    for runner in runners.values():
        runner.embed_documents(chunks[:bs])
    for _ in range(2):
        for name, runner in runners.items():
            t = time.perf_counter()
            runner.embed_documents(chunks)
            best[name] = max(best.get(name, 0.0), n_tokens / (time.perf_counter() - t))
    return {f"{name}_tokens_per_s": value for name, value in best.items()}
