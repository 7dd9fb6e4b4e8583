"""The passage-level ranking metrics of the retrieval evaluation (bench/eval/metrics.py)."""

from __future__ import annotations

import math

import pytest

from bench.eval.metrics import mrr, ndcg, recall, summarise


def test_a_document_counts_at_its_best_chunk_only():
    ranked = ["x", "a", "a", "b", "a"]
    assert mrr(ranked, {"a"}) == pytest.approx(0.5)
    assert recall(ranked, {"a", "b"}) == 1.0
    # a at rank 2, b at rank 4; repeats of a add nothing
    ideal = 1 + 1 / math.log2(3)
    assert ndcg(ranked, {"a", "b"}) == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / ideal)


def test_cutoff_and_misses():
    ranked = [f"d{i}" for i in range(20)]
    assert mrr(ranked, {"d10"}, k=10) == 0.0 and recall(ranked, {"d10"}, k=10) == 0.0
    assert mrr(ranked, {"d9"}, k=10) == pytest.approx(0.1)
    assert recall(ranked, {"d0", "d15"}, k=10) == 0.5
    assert ndcg([], {"a"}) == 0.0 and recall(["a"], set()) == 0.0


def test_perfect_ranking_scores_one_and_more_relevant_than_k_caps_the_ideal():
    assert ndcg(["a", "b"], {"a", "b"}) == pytest.approx(1.0)
    many = {f"r{i}" for i in range(15)}
    assert ndcg([f"r{i}" for i in range(10)], many, k=10) == pytest.approx(1.0)


def test_summarise_means_over_questions():
    out = summarise([(["a"], {"a"}), (["b", "a"], {"a"}), (["c"], {"a"})], k=10)
    assert out["mrr@10"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert out["recall@10"] == pytest.approx(2 / 3)
