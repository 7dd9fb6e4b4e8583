"""The fusion functions the exploration compares (bench/eval/fusion_variants.py) against the engine's fuse."""

from __future__ import annotations

import random

import pytest

from bench.eval.fusion_variants import combine, length_scaled, margin_gate, variants
from ragengine.retrieval.hybrid import FusionParams, fuse


def lists(seed: int) -> tuple[list, list]:
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(60)]
    dense = sorted(((k, rng.uniform(0.1, 0.8)) for k in rng.sample(keys, 20)), key=lambda kv: -kv[1])
    sparse = sorted(((k, rng.uniform(0.5, 20.0)) for k in rng.sample(keys, 20)), key=lambda kv: -kv[1])
    return dense, sparse


@pytest.mark.parametrize("seed", range(5))
def test_the_engine_family_is_the_engines_fuse(seed):
    # The exploration's "convex minmax/by_max (engine)" must rank exactly as the engine does, or its
    # rows would not be comparable with the grid of make eval.
    dense, sparse = lists(seed)
    for w in (0.5, 0.75, 0.85):
        ours = [k for k, _ in combine(dense, sparse, w, 1 - w, "minmax", "by_max")]
        engine = [k for k, _ in fuse(dense, sparse, params=FusionParams(method="convex", dense_weight=w))]
        assert ours == engine
    fn = variants()["convex minmax/by_max (engine) [w=0.85]"][2]
    assert [k for k, _ in fn(dense, sparse, 5)] == [k for k, _ in fuse(dense, sparse, params=FusionParams())]


def test_margin_gate_lets_bm25_reorder_only_near_the_top():
    dense = [("a", 0.80), ("b", 0.79), ("c", 0.60), ("d", 0.59)]
    sparse = [("b", 10.0), ("d", 10.0), ("e", 9.0)]
    order = [k for k, _ in margin_gate(dense, sparse, delta=0.05, beta=0.1)]
    # b is within 0.05 of the top and gets the BM25 boost; d is not, so c stays ahead of it;
    # a BM25-only hit comes after every dense candidate.
    assert order == ["b", "a", "c", "d", "e"]


def test_calibrated_cosine_gives_missing_keys_the_lowest_listed_cosine():
    dense = [("a", 0.7), ("b", 0.5)]
    sparse = [("x", 4.0)]
    fused = dict(combine(dense, sparse, 1.0, 0.1, "cosine", "by_max"))
    assert fused["x"] == pytest.approx(0.5 + 0.1)  # floor 0.5 (an upper bound of its cosine) + beta
    assert fused["a"] == pytest.approx(0.7)


def test_length_scaling_shrinks_bm25_only_past_the_reference_length():
    assert length_scaled(0.1, 16, 4) == pytest.approx(0.1)
    assert length_scaled(0.1, 16, 32) == pytest.approx(0.05)
    assert length_scaled(0.1, 16, 0) == pytest.approx(0.1)
