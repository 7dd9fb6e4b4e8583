"""Questions longer than the embedding model's window (retrieval/long_query.py, setting long_query_windows)."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from ragengine.retrieval.long_query import MAX_WINDOWS, embed_queries_sync, embed_query, pieces, pool_windows, window_spans

# Neutral filler (well past all-MiniLM-L6-v2's 256 tokens) before the actual request: cut at the window,
# the question's vector is the filler's alone.
PREAMBLE = "Some background that matters little for what follows. " * 40
ASK = "How long should sourdough bread dough rise before it goes into the oven?"
BREAD = {"doc_id": "bread", "text": "Let sourdough bread dough rise for four to six hours before baking it in a hot oven."}
KERNEL = {"doc_id": "kernel", "text": "Load a Linux kernel module with modprobe and list the loaded ones with lsmod."}


def test_window_spans_cover_every_token_in_windows_of_at_most_size():
    offsets = [(0, 3), (4, 7), (8, 11), (12, 15), (16, 19)]
    assert window_spans(offsets, 2) == [(0, 7, 2), (8, 15, 2), (16, 19, 1)]
    assert window_spans(offsets, 5) == [(0, 19, 5)]
    assert window_spans([], 3) == []
    with pytest.raises(ValueError):
        window_spans(offsets, 0)


def test_window_spans_stop_at_max_windows():
    """A pasted book costs at most MAX_WINDOWS passes, not one per 254 tokens."""
    offsets = [(i, i + 1) for i in range(10_000)]
    spans = window_spans(offsets, 254)
    assert len(spans) == MAX_WINDOWS and spans[-1] == (254 * 15, 254 * 16, 254)
    assert len(window_spans(offsets[:600], 254)) == 3  # below the cap: every token


def test_pool_windows_is_the_token_weighted_unit_mean():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    pooled = pool_windows(vectors, [3, 1])
    assert np.linalg.norm(pooled) == pytest.approx(1.0)
    assert pooled == pytest.approx(np.array([3.0, 1.0]) / np.sqrt(10.0))


def test_short_questions_are_embedded_as_before_and_long_ones_window_by_window(embedder):
    assert pieces(embedder, ASK) is None
    short = asyncio.run(embed_query(embedder, ASK, windows=True))
    assert np.array_equal(short, embedder.embed_query_sync(ASK))

    long_text = PREAMBLE + ASK
    cut = pieces(embedder, long_text)
    assert cut is not None and len(cut) >= 2
    assert all(n <= embedder.chunk_token_limit for _, n in cut)
    assert cut[-1][0].endswith("oven?")  # the request at the end is embedded, not dropped
    texts, counts = [p for p, _ in cut], [n for _, n in cut]
    assert " ".join(texts).split() == long_text.split()  # every word, in order, in some window
    assert counts == [embedder.count_tokens(p) for p in texts] and sum(counts) == embedder.count_tokens(long_text)
    windowed = asyncio.run(embed_query(embedder, long_text, windows=True))
    # The oracle, without long_query's pooling: the windows' vectors (one batch, as the engine embeds them),
    # their token-weighted mean, made unit length.
    total = (embedder.embed_queries_sync(texts) * np.array(counts, dtype=np.float32)[:, None]).sum(axis=0)
    expected = total / np.linalg.norm(total)
    assert windowed == pytest.approx(expected, abs=1e-5)
    assert embed_queries_sync(embedder, [long_text, ASK], windows=True) == pytest.approx(
        np.stack([expected, short]), abs=1e-5)
    # without windows: the model's own cut, the old behaviour
    truncated = asyncio.run(embed_query(embedder, long_text, windows=False))
    assert np.array_equal(truncated, embedder.embed_query_sync(long_text))
    assert float(truncated @ windowed) < 0.99


def _dense_scores(base: str, **extra) -> dict[str, float]:
    resp = httpx.post(f"{base}/retrieve", json={"index_name": "kb", "query": PREAMBLE + ASK, "max_node_count": 2,
                                                **extra}, timeout=60)
    assert resp.status_code == 200, resp.text
    return {r["doc_id"]: r["dense_score"] for r in resp.json()["results"]}


def test_retrieve_embeds_a_long_question_whole_when_the_setting_or_the_request_asks(make_server):
    with make_server(hybrid=False) as (base, _):
        httpx.post(f"{base}/index", json={"index_name": "kb", "documents": [BREAD, KERNEL]}, timeout=60).raise_for_status()
        cut = _dense_scores(base)  # the default: long_query_windows off
        windowed = _dense_scores(base, long_query_windows=True)
        assert windowed["bread"] > windowed["kernel"]
        assert windowed["bread"] > cut["bread"] + 0.1  # the request after the filler now counts
    with make_server(hybrid=False, long_query_windows=True) as (base, _):
        assert _dense_scores(base) == pytest.approx(windowed)
        assert _dense_scores(base, long_query_windows=False) == pytest.approx(cut)
