"""Concurrent query embeddings share forward passes and give the same vectors as one at a time."""

from __future__ import annotations

import asyncio

import numpy as np


async def test_concurrent_queries_are_batched(embedder):
    queries = [f"question {i}: how does the journal keep writes durable?" for i in range(12)]
    one_by_one = np.stack([embedder.embed_query_sync(q) for q in queries])

    passes: list[int] = []
    original = embedder.embed_queries_sync

    def counting(texts):
        passes.append(len(texts))
        return original(texts)

    embedder.embed_queries_sync = counting
    try:
        together = await asyncio.gather(*(embedder.embed_query(q) for q in queries))
    finally:
        del embedder.embed_queries_sync
    assert sum(passes) == len(queries)
    assert len(passes) < len(queries)  # at least some queries shared a pass
    np.testing.assert_allclose(np.stack(together), one_by_one, atol=1e-5)


async def test_a_failing_pass_fails_its_waiters_only(embedder):
    original = embedder.embed_queries_sync

    def broken(texts):
        raise RuntimeError("model exploded")

    embedder.embed_queries_sync = broken
    try:
        results = await asyncio.gather(embedder.embed_query("a"), embedder.embed_query("b"), return_exceptions=True)
    finally:
        del embedder.embed_queries_sync
    assert all(isinstance(r, RuntimeError) for r in results)
    vector = await embedder.embed_query("after the failure")
    assert vector.shape == (embedder.dim,)
    assert callable(original)
