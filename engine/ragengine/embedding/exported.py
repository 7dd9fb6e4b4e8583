"""A transformer exported to ONNX (``export``), run on the CPU without torch: what every runtime shares.

``ExportedModel`` reads the export's files (tokenizer, pooling, length limit, query prompt), tokenizes
with the ``tokenizers`` library, cuts length-bucketed batches and pools; a subclass only compiles the
ONNX file for its runtime (``onnx_backend``: ONNX Runtime, ``openvino_backend``: OpenVINO).

Batches: the texts of one call are tokenized once, sorted by token count and cut into batches of
similar length, so a batch pads to its longest member and that is nearly every member's length (no
padding waste); results go back in the caller's order.

Threads: a document pass runs ``threads`` batches at once (default: every core the process may use,
cgroup quota included, at most 8), each batch on one thread: data parallel, not one batch split across threads.
Measured with OpenVINO bf16 on 2 cores (docs/performance.md): 9,200-10,600 tokens/s against
4,400-6,700 for one batch on two intra-op threads while another process kept a core busy, since one
delayed thread stalls every step of an intra-op pass. Queries run on a model compiled for one thread:
a query is short and latency-bound, and it never waits for a document batch to free a stream (OpenVINO adds
a model for a lone short query, ``openvino_backend``).
``python -m bench.bench_engine --only ingest`` prints the runtimes at 1 thread and at every core.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ragengine.embedding.tokens import FastTokenizer

QUERY_THREADS = 1  # see the module docstring
# Each document stream keeps its own buffers: about 120 MiB per stream measured with OpenVINO (1,000
# passages: +113 MiB at one stream, +237 at two). A pod without a CPU limit sees every core of its node,
# so the default stops at 8 streams (~1 GiB, within the operator's default 2 GiB memory request);
# RAGENGINE_EMBEDDING_THREADS sets more explicitly.
MAX_DEFAULT_THREADS = 8
# Tokens per forward pass: bounds a batch's activations whatever its length. Measured on 300 passages:
# 16,384 gave 2.7 texts/s at 1,321 MiB peak, 4,096 gave 5.5 texts/s at 503 MiB (cache-sized batches).
# Then on 1,000 Python-docs passages, OpenVINO, 2 streams (issue 45, the engine's peak RSS): 4,096 peaked at
# 563-568 MiB for 35.4-36.2 s of CPU, 2,048 at 504 MiB / 34.5 s, 1,024 at 449-450 MiB / 33.8-34.3 s, 512 at
# 465 MiB / 34.1 s. Below 1,024 nothing more is saved; the CPU per passage does not grow down to it.
TOKENS_PER_BATCH = 1_024
# Document batches pad to a multiple of this many tokens (queries do not: a 14-token query would run 32; a lone
# short query pads to the length of a model compiled for it, where a runtime has one: openvino_backend).
# OpenVINO keeps kernels and buffers for each input shape it has run, so fewer distinct shapes hold less:
# embedding 1,000 passages on 2 streams peaked at 557 MiB unpadded, 508 padded to 32 (522 to 64), at no
# more CPU (35.3 -> 32.6 s; issue 45, the engine's peak RSS).
PAD_MULTIPLE = 32

Feed = dict[str, np.ndarray]
Run = Callable[[Feed], np.ndarray]  # one padded batch → the last hidden state; callable from many threads


def cpu_threads(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (a pod's CPU limit),
    rounded up. Without the cap a pod limited to 2 CPUs on a 64-core node would start 64 threads."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota
    return max(1, cores)


def default_threads() -> int:
    """Document streams when ``embedding_threads`` is 0: every usable core, at most ``MAX_DEFAULT_THREADS``."""
    return min(cpu_threads(), MAX_DEFAULT_THREADS)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


class ExportedModel:
    """The model-side half of an ONNX embedding backend; subclasses implement ``_compile``."""

    name = "exported"
    precision = "f32"  # OpenVINO may pick bf16
    # (n, a run compiled for exactly one text of n tokens): a lone query of up to n tokens is padded to n and
    # run there; set by a runtime whose dynamic-shape model pays for every change of input length.
    _short_queries: tuple[int, Run] | None = None

    def __init__(self, model_dir: str | Path, onnx_file: str | Path, batch_size: int, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
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
        self.threads = threads or default_threads()
        self._documents, self._inputs = self._compile(Path(onnx_file), self.threads)
        # Always a model of its own, even at one document thread: OpenVINO runs the requests of one stream
        # in turn, so a query sharing the documents' model waited ~540 ms behind a batch (measured).
        self._queries = self._compile(Path(onnx_file), QUERY_THREADS)[0]
        self._streams = ThreadPoolExecutor(self.threads, "embed-stream") if self.threads > 1 else None
        self.dim = int(self._forward(self._tok.encode_batch(["dimension probe"]), self._queries).shape[1])

    def _compile(self, onnx_file: Path, streams: int) -> tuple[Run, set[str]]:
        """(a function running one batch on one thread, callable by ``streams`` threads at once without
        waiting on each other; the model's input names)."""
        raise NotImplementedError

    def _padded(self, length: int, multiple: int) -> int:
        return min(-(-length // multiple) * multiple, max(length, self.max_tokens))

    def _forward(self, encodings: list, run: Run, multiple: int = 1) -> np.ndarray:
        """One padded batch → pooled vectors (not normalised); the length padded to ``multiple``."""
        length = self._padded(max(len(e.ids) for e in encodings), multiple)
        ids = np.zeros((len(encodings), length), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = run(feed)
        if self._cls_pooling:
            return hidden[:, 0]
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)

    def _batches(self, encodings: list, multiple: int = 1) -> list[list[int]]:
        """Indexes of ``encodings`` in length-sorted batches within ``batch_size`` and ``TOKENS_PER_BATCH``
        (counted at the padded length)."""
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        batches, start = [], 0
        while start < len(order):
            # Longest member last (sorted): grow the batch while it stays within both limits.
            end = start + 1
            while (end < len(order) and end - start < self.batch_size
                   and (end - start + 1) * self._padded(len(encodings[order[end]].ids), multiple) <= TOKENS_PER_BATCH):
                end += 1
            batches.append(order[start:end])
            start = end
        return batches

    def _embed(self, texts: list[str], run: Run, pool: ThreadPoolExecutor | None = None, multiple: int = 1) -> np.ndarray:
        encodings = self._tok.encode_batch(texts)
        batches = self._batches(encodings, multiple)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        vectors = (pool.map if pool is not None and len(batches) > 1 else map)(
            lambda idx: self._forward([encodings[i] for i in idx], run, multiple), batches)
        for idx, batch_vectors in zip(batches, vectors, strict=True):
            out[idx] = batch_vectors
        return out

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, self._documents, self._streams, PAD_MULTIPLE)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        texts = [self._query_prompt + t for t in texts] if self._query_prompt else texts
        short = self._short_queries if len(texts) == 1 else None
        if short is not None:
            length, run = short
            encodings = self._tok.encode_batch(texts)
            if len(encodings[0].ids) <= length:
                return self._forward(encodings, run, length)
            return self._forward(encodings, self._queries)
        return self._embed(texts, self._queries)

    def close(self) -> None:
        if self._streams is not None:
            self._streams.shutdown(wait=False, cancel_futures=True)
