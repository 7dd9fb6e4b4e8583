"""The BM25 index's top k is exactly the k best of a full ranking: the shortcut that sorts only the slots
scoring at least the rarest term's k-th best, and the length norm kept between writes, change no answer."""

from __future__ import annotations

import numpy as np

from ragengine.retrieval.bm25 import BM25Index

WORDS = [f"w{i}" for i in range(60)]


def corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    return [" ".join(WORDS[j] for j in rng.choice(len(WORDS), int(rng.integers(3, 30)), p=p)) for _ in range(n)]


def top_scores(bm25: BM25Index, query: str, k: int, alive=None, allowed=None) -> np.ndarray:
    _, scores = bm25.search(query, k, alive, allowed)
    return np.sort(scores)[::-1]


def test_top_k_equals_the_k_best_of_the_full_ranking_through_writes_and_removals():
    texts = corpus(3000, seed=1)
    bm25 = BM25Index()
    for slot, t in enumerate(texts):
        bm25.add(slot, t)
    rng = np.random.default_rng(2)
    queries = [" ".join(rng.choice(WORDS, int(rng.integers(1, 6)))) for _ in range(40)]
    n = len(texts)

    def check(alive=None, allowed=None) -> None:
        for q in queries:
            full = top_scores(bm25, q, n, alive=alive, allowed=allowed)
            for k in (1, 10, 50):
                got = top_scores(bm25, q, k, alive=alive, allowed=allowed)
                assert np.allclose(got, full[:k]), (q, k)

    check()
    for slot in range(0, n, 3):  # removed: their postings stay, masked by their zero length
        bm25.remove(slot, texts[slot])
    check()
    slots, _ = bm25.search(queries[0], n, None)
    assert not set(slots.tolist()) & set(range(0, n, 3))
    allowed = np.zeros(n, bool)
    allowed[::5] = True
    check(alive=np.ones(n, bool), allowed=allowed)
    before = top_scores(bm25, queries[1], 10)
    bm25.add(n, " ".join(queries[1].split() * 3))  # a write changes the average length: the norm follows
    after = top_scores(bm25, queries[1], 10)
    assert after[0] > before[0]
    check()


def test_kept_impacts_give_the_scores_of_a_fresh_index_through_writes_and_stay_within_their_budget():
    """Each term's ``tf / (tf + norm)`` is kept between queries; a write changes the norm, so a kept factor
    must never outlive it. Compared with an index that keeps nothing (budget 0), after every change."""
    texts = corpus(2000, seed=3)
    rng = np.random.default_rng(4)
    queries = [" ".join(rng.choice(WORDS, int(rng.integers(1, 6)))) for _ in range(30)]
    kept, fresh = BM25Index(impact_budget=4_000), BM25Index(impact_budget=0)  # room for a few terms only
    for slot, t in enumerate(texts):
        kept.add(slot, t)
        fresh.add(slot, t)

    def same() -> None:
        for q in queries * 2:  # the second pass reads the kept factors
            a, b = kept.search(q, 20, None), fresh.search(q, 20, None)
            assert a[0].tolist() == b[0].tolist() and np.array_equal(a[1], b[1]), q
        assert 0 < kept._impact_bytes <= 4_000 and not fresh._impacts

    same()
    kept.add(2000, "w0 w0 w0 w1")  # a new slot and a longer average: every factor changes
    fresh.add(2000, "w0 w0 w0 w1")
    same()
    for slot in range(0, 2000, 7):
        kept.remove(slot, texts[slot])
        fresh.remove(slot, texts[slot])
    same()
