"""bench/bench_memory.py's own arithmetic: the exact top-k it keeps over batches, recall, the per-100k slope."""

from __future__ import annotations

import numpy as np

from bench.bench_memory import ExactTop, per_100k, recall_at


def test_exact_top_over_batches_is_the_exact_top_of_all():
    rng = np.random.default_rng(0)
    vectors, queries = rng.standard_normal((2500, 16)).astype(np.float32), rng.standard_normal((7, 16)).astype(np.float32)
    top = ExactTop(queries, k=10)
    for first in range(0, 2500, 300):  # uneven batches, the last one short
        top.add(vectors[first:first + 300], first)
    assert np.array_equal(top.ids, np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :10])


def test_recall_counts_true_neighbours_found():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert recall_at([np.array([1, 2, 9, 10]), np.array([8, 7, 6, 5])], truth) == 6 / 8


def test_per_100k_is_the_slope_between_the_first_and_last_rows():
    rows = [{"chunks": 100_000, "rss_mib": 300.0}, {"chunks": 200_000, "rss_mib": 520.0},
            {"chunks": 300_000, "rss_mib": 700.0}]
    assert per_100k(rows, "rss_mib") == 200.0
