"""Concurrent query embeddings share forward passes and give the same vectors as one at a time.

Each test wraps a borrowed Embedder of its own (tests/support/embedding.py), never the session's shared one."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from tests.support.embedding import borrowed


@pytest.fixture
def own(embedder):
    with borrowed(embedder) as emb:
        yield emb


async def test_concurrent_queries_are_batched(own):
    queries = [f"question {i}: how does the journal keep writes durable?" for i in range(12)]
    one_by_one = np.stack([own.embed_query_sync(q) for q in queries])

    passes: list[int] = []
    original = own.embed_queries_sync

    def counting(texts):
        passes.append(len(texts))
        return original(texts)

    own.embed_queries_sync = counting
    together = await asyncio.gather(*(own.embed_query(q) for q in queries))
    assert sum(passes) == len(queries)
    assert len(passes) < len(queries)  # at least some queries shared a pass
    np.testing.assert_allclose(np.stack(together), one_by_one, atol=1e-5)


async def test_a_failing_pass_fails_its_waiters_only(own):
    """Query "a" is in a forward pass that fails; "b" arrives during that pass, so it waits for the next
    one: "a" gets the error, "b" its vector, and the batcher keeps working afterwards."""
    original = own.embed_queries_sync
    entered, release = threading.Event(), threading.Event()
    passes: list[list[str]] = []

    def first_pass_fails(texts):
        passes.append(list(texts))
        if len(passes) == 1:
            entered.set()
            release.wait(30)
            raise RuntimeError("model exploded")
        return original(texts)

    own.embed_queries_sync = first_pass_fails
    a = asyncio.create_task(own.embed_query("a"))
    assert await asyncio.to_thread(entered.wait, 30), "the first pass never started"
    b = asyncio.create_task(own.embed_query("b"))
    await asyncio.sleep(0)  # let "b" join the queue (it cannot join the pass already running)
    release.set()
    results = await asyncio.gather(a, b, return_exceptions=True)
    assert passes == [["a"], ["b"]]
    assert isinstance(results[0], RuntimeError) and str(results[0]) == "model exploded"
    np.testing.assert_allclose(results[1], own.embed_query_sync("b"), atol=1e-5)
    after = await own.embed_query("after the failure")
    np.testing.assert_allclose(after, own.embed_query_sync("after the failure"), atol=1e-5)
