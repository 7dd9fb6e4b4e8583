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
    # A lone short query runs OpenVINO's static model, a batch the dynamic one: bf16 rounds differently per
    # model and batch (up to 6e-4 per component seen, docs/performance.md); a wrong vector differs by ~0.1.
    np.testing.assert_allclose(np.stack(together), one_by_one, atol=2e-3)


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


async def test_a_lone_query_is_in_the_thread_before_the_event_loop_turns_again(own):
    """Nothing in flight: the query goes to the thread from ``embed_query`` itself. Handed to a drain task, it
    waited a turn of the event loop behind whatever else was ready (0.39 ms median in bench_turn's chat turn);
    here the loop is held after that first step, so on the old code the pass never started."""
    started = threading.Event()
    original = own.embed_queries_sync

    def noting(texts):
        started.set()
        return original(texts)

    own.embed_queries_sync = noting
    task = asyncio.create_task(own.embed_query("alone"))
    await asyncio.sleep(0)  # one turn: the task runs up to its await
    assert started.wait(10), "the pass waited for the event loop to turn again"
    np.testing.assert_allclose(await task, own.embed_query_sync("alone"), atol=1e-5)
