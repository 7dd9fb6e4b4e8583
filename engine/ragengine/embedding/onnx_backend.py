"""ONNX Runtime as an embedding backend (CPU, no torch): the transformer exported by ``export``, the
tokenizer from the ``tokenizers`` library, pooling and the length limit read from the model's own
sentence-transformers files.

Batches are length-bucketed: the texts of one call are tokenized once, sorted by token count and cut
into batches of similar length, so a batch pads to its longest member and that is nearly every
member's length (no padding waste); results go back in the caller's order.

Threads: one intra-op thread per session run, measured (docs/performance.md): on this 2-core machine
under load, 1 thread gave 5.5 passages/s and 12.9 ms query p50 against 4.3 passages/s and 38.3 ms with
2 threads (and torch: 4.4 passages/s, 475 ms). The document and query executors run side by side, so
each pass keeping to one core also keeps queries from waiting on an ingestion batch.
``bench/bench_engine.py``'s ingestion section prints 1 thread against all cores to re-check elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ragengine.embedding.tokens import FastTokenizer

DEFAULT_THREADS = 1  # measured, see the module docstring
# Tokens per forward pass: bounds a batch's activations whatever its length. Measured on 300 passages:
# 16,384 gave 2.7 texts/s at 1,321 MiB peak, 4,096 gave 5.5 texts/s at 503 MiB (cache-sized batches).
TOKENS_PER_BATCH = 4_096


def cpu_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


class OnnxBackend:
    name = "onnx"

    def __init__(self, model_dir: str | Path, onnx_file: str | Path, batch_size: int, threads: int | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or DEFAULT_THREADS
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self.session.get_inputs()}
        own = _read_json(model_dir / "ragengine_onnx.json")  # written by ``export``; else the sentence-transformers files
        st_config = _read_json(model_dir / "sentence_bert_config.json")
        self.max_tokens = int(own.get("max_seq_length") or st_config.get("max_seq_length")
                              or _read_json(model_dir / "config.json").get("max_position_embeddings", 512))
        pooling = _read_json(model_dir / "1_Pooling" / "config.json")
        self._cls_pooling = own.get("pooling", "cls" if pooling.get("pooling_mode_cls_token") else "mean") == "cls"
        prompts = _read_json(model_dir / "config_sentence_transformers.json").get("prompts") or {}
        self._query_prompt = own.get("query_prompt", prompts.get("query", ""))
        raw = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer = FastTokenizer(raw)
        raw.no_padding()
        raw.enable_truncation(self.max_tokens)
        self._tok = raw
        self.batch_size = batch_size
        self.dim = int(self._forward(self._tok.encode_batch(["dimension probe"])).shape[1])

    def _forward(self, encodings: list) -> np.ndarray:
        """One padded batch → pooled vectors (not normalised)."""
        length = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), length), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feed)[0]
        if self._cls_pooling:
            return hidden[:, 0]
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)

    def embed(self, texts: list[str]) -> np.ndarray:
        encodings = self._tok.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            # Longest member last (sorted): grow the batch while it stays within both limits.
            end = start + 1
            while (end < len(order) and end - start < self.batch_size
                   and (end - start + 1) * len(encodings[order[end]].ids) <= TOKENS_PER_BATCH):
                end += 1
            idx = order[start:end]
            out[idx] = self._forward([encodings[i] for i in idx])
            start = end
        return out

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed([self._query_prompt + t for t in texts] if self._query_prompt else texts)

    def close(self) -> None:
        pass
