"""Synthetic corpora for the engine benchmarks (deterministic, no downloads)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

_WORDS = [
    "engine", "index", "vector", "search", "query", "answer", "document", "chunk", "model", "token", "embedding",
    "cluster", "node", "pod", "service", "storage", "journal", "snapshot", "latency", "memory", "cache", "disk",
    "network", "request", "response", "score", "filter", "metadata", "kubernetes", "operator", "deploy", "scale",
    "replica", "volume", "config", "secret", "health", "metric", "trace", "log", "error", "retry", "timeout",
    "batch", "stream", "shard", "partition", "replica", "leader", "follower", "commit", "rollback", "schema",
    "table", "column", "row", "python", "rust", "golang", "java", "compiler", "runtime", "thread", "process",
    "signal", "kernel", "driver", "device", "gpu", "cpu", "core", "garden", "tomato", "river", "mountain", "city",
    "music", "guitar", "piano", "novel", "poem", "history", "science", "physics", "biology",
]


SMALL_WORDS = (8, 20)  # passages indexed through the real embedding path: short, to keep the run short


def vocabulary(size: int = 3000, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    made = {"".join(rng.choice(letters, rng.integers(4, 10))) for _ in range(size)}
    return _WORDS + sorted(made)


def passages(n: int, words: tuple[int, int] = (20, 40), seed: int = 1, first: int = 0) -> list[str]:
    """``n`` pseudo-sentences of ``words`` words from a Zipf-ish vocabulary (so BM25 has real work), numbered
    from ``first``."""
    vocab = vocabulary()
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 0.9
    p /= p.sum()
    out = []
    for i in range(n):
        k = int(rng.integers(words[0], words[1] + 1))
        ws = rng.choice(len(vocab), size=k, p=p)
        out.append(f"Passage {first + i}: " + " ".join(vocab[w] for w in ws) + ".")
    return out


def clustered_unit_vectors(n: int, dim: int = 384, clusters: int = 1000, spread: float = 0.35,
                           seed: int = 2) -> np.ndarray:
    """Unit vectors around ``clusters`` random centres: closer to real embeddings than iid noise."""
    out = np.empty((n, dim), dtype=np.float32)
    start = 0
    for batch in clustered_unit_batches(n, dim, clusters, spread, seed):
        out[start : start + len(batch)] = batch
        start += len(batch)
    return out


def clustered_unit_batches(n: int, dim: int = 384, clusters: int = 1000, spread: float = 0.35, seed: int = 2,
                           step: int = 100_000) -> Iterator[np.ndarray]:
    """``clustered_unit_vectors`` ``step`` rows at a time (the same rows for the default ``step``), so a
    benchmark need not hold a million of them besides the index it measures."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    for start in range(0, n, step):
        m = min(step, n - start)
        x = centres[rng.integers(0, clusters, m)] + spread * rng.standard_normal((m, dim)).astype(np.float32) / np.sqrt(dim)
        yield x / np.linalg.norm(x, axis=1, keepdims=True)
