"""The pure fusion function every store backend calls (retrieval/hybrid.py)."""

from __future__ import annotations

import pytest

from ragengine.index.search import _pool_size
from ragengine.retrieval.hybrid import FusionParams, candidate_pool, fuse, rrf
from ragengine.settings import EngineSettings

DENSE = [("a", 0.80), ("b", 0.70), ("c", 0.40)]
SPARSE = [("c", 12.0), ("d", 6.0), ("b", 3.0)]


def keys(fused):
    return [k for k, _ in fused]


def test_rrf_with_equal_weights_orders_like_classic_rrf():
    params = FusionParams(method="rrf", dense_weight=0.5, rrf_k=60)
    assert keys(fuse(DENSE, SPARSE, params=params)) == keys(rrf(keys(DENSE), keys(SPARSE)))


def test_weight_one_is_the_dense_order_and_zero_the_sparse_order():
    for method in ("rrf", "convex"):
        only_dense = keys(fuse(DENSE, SPARSE, params=FusionParams(method=method, dense_weight=1.0)))
        assert only_dense[:3] == ["a", "b", "c"], method
        only_sparse = keys(fuse(DENSE, SPARSE, params=FusionParams(method=method, dense_weight=0.0)))
        assert only_sparse[:3] == ["c", "d", "b"], method


def test_convex_normalises_each_side_before_weighting():
    fused = dict(fuse(DENSE, SPARSE, params=FusionParams(method="convex", dense_weight=0.5)))
    # dense min-max over its list: a=1, b=0.75, c=0; BM25 over its max: c=1, d=0.5, b=0.25
    assert fused["a"] == pytest.approx(0.5)
    assert fused["b"] == pytest.approx(0.5 * 0.75 + 0.5 * 0.25)
    assert fused["c"] == pytest.approx(0.5)
    assert fused["d"] == pytest.approx(0.25)
    # ties keep first appearance (dense first): a before c
    assert keys(fuse(DENSE, SPARSE, params=FusionParams(method="convex", dense_weight=0.5)))[:2] == ["a", "c"]


def test_convex_lifts_a_chunk_strong_on_both_sides_above_single_side_winners():
    dense = [("x", 0.61), ("both", 0.60), ("y", 0.30)]
    sparse = [("z", 10.0), ("both", 9.5), ("w", 1.0)]
    assert keys(fuse(dense, sparse, params=FusionParams(method="convex", dense_weight=0.5)))[0] == "both"


def test_empty_and_one_sided_inputs():
    assert fuse([], []) == []
    assert keys(fuse(DENSE, [], params=FusionParams(method="convex"))) == ["a", "b", "c"]
    assert keys(fuse([], SPARSE, params=FusionParams(method="convex"))) == ["c", "d", "b"]
    assert keys(fuse([("only", 0.3)], [], params=FusionParams(method="convex"))) == ["only"]


def test_inputs_are_not_modified():
    dense, sparse = list(DENSE), list(SPARSE)
    fuse(dense, sparse, params=FusionParams(method="convex"))
    assert dense == DENSE and sparse == SPARSE


@pytest.mark.parametrize("bad", [{"method": "max"}, {"dense_weight": 1.5}, {"dense_weight": -0.1}, {"rrf_k": 0}])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        FusionParams(**bad)


def test_params_from_settings():
    s = EngineSettings(fusion="rrf", fusion_dense_weight=0.7, rrf_k=10)
    assert FusionParams.from_settings(s) == FusionParams(method="rrf", dense_weight=0.7, rrf_k=10)
    assert FusionParams.from_settings(object()) == FusionParams()


def test_the_default_is_the_evaluated_convex_fusion_and_rrf_restores_the_old_one():
    # docs/retrieval.md: convex, dense weight 0.85, 50 candidates per side, chosen on zaragoza-construction-faq
    assert FusionParams.from_settings(EngineSettings()) == FusionParams(method="convex", dense_weight=0.85)
    assert EngineSettings().fusion_candidates == 50
    old = FusionParams.from_settings(EngineSettings(fusion="rrf", fusion_dense_weight=0.5, rrf_k=60))
    assert keys(fuse(DENSE, SPARSE, params=old)) == keys(rrf(keys(DENSE), keys(SPARSE)))


def test_candidate_pool_is_twice_the_results_wanted_and_at_least_the_minimum():
    assert candidate_pool(10) == 50  # the evaluated default for top 10
    assert candidate_pool(10, minimum=20) == 20  # the pool before fusion_candidates
    assert candidate_pool(40) == 80
    assert candidate_pool(1, minimum=1) == 2


def test_the_search_fetches_fusion_candidates_per_side():
    # The FAISS path's pool follows settings.fusion_candidates (it was a fixed 20 for top 10).
    assert _pool_size(10, False, EngineSettings()) == 50
    assert _pool_size(10, False, EngineSettings(fusion_candidates=20)) == 20
    assert _pool_size(10, True, EngineSettings(rerank_candidates=50)) == 100  # the reranker's candidates, twice
    with pytest.raises(ValueError):
        EngineSettings(fusion_candidates=0)
