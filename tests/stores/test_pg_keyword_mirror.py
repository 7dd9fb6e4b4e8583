"""Each replica's in-memory keyword index of a PostgreSQL index (``keyword_mirror``) stays in step with what
every replica wrote: two stores on one real PostgreSQL 18 + pgvector play two engine replicas. Also the
counts kept in each index's row, and the query-term cap of the BM25 index."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import func, select, text

from ragengine.retrieval.bm25 import BM25Index
from ragengine.retrieval.filters import parse_filters
from ragengine.stores.base import ChunkWrite, DocWrite, NoSuchIndex
from ragengine.stores.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres
DIM = 8
WORDS = ["harbour", "lantern", "granite", "meadow", "copper", "willow", "thistle", "falcon"]


def unit(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def doc(i: int, extra: str = "") -> DocWrite:
    body = f"note {i} about the {WORDS[i % len(WORDS)]} and the {WORDS[(i * 3) % len(WORDS)]} {extra}".strip()
    return DocWrite(f"d{i}", body, {"i": i}, [ChunkWrite(0, body), ChunkWrite(1, f"second part of note {i} {extra}")])


def write(store: PostgresStore, docs: list[DocWrite], delete: list[str] | None = None) -> None:
    n = sum(len(d.chunks) for d in docs)
    store.write("kb", {}, delete or [], docs, unit(n, len(docs) + len(delete or [])), add_only=False)


def wait_for(check, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "the mirror's loader did not catch up"
        time.sleep(0.05)


@pytest.fixture
def replicas(pgvector_url, store_prefix):
    a = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM)
    b = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM)
    a.open()
    b.open()
    yield a, b
    a.close()
    b.close()


def keyword_ids(store: PostgresStore, query: str, k: int = 10) -> list[tuple[str, int]]:
    return [(h.doc_id, h.seq) for h in store.keyword("kb", query, unit(1, 99)[0], k, None)]


def table_chunks(store: PostgresStore) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(store.t.chunks)
                            .where(store.t.chunks.c.index_name == "kb")).scalar_one()


def test_a_write_through_one_replica_is_in_the_next_keyword_search_of_another(replicas):
    a, b = replicas
    write(a, [doc(i) for i in range(40)])
    assert b.warm_keyword("kb")
    assert b.mirrors.held() == {"kb": 80}
    assert keyword_ids(b, "zeppelin") == []

    write(a, [doc(100, "zeppelin")])  # acknowledged through a; b's very next search must have it
    assert set(keyword_ids(b, "zeppelin")) == {("d100", 0), ("d100", 1)}
    assert b.mirrors.held() == {"kb": 82}  # caught up in memory, not answered by the SQL leg

    write(a, [doc(100)], delete=["d100"])  # an update: the old chunks go, the new ones have no zeppelin
    assert keyword_ids(b, "zeppelin") == []
    write(a, [], delete=["d3", "d4"])  # b's follower, or at the latest its next search, takes them out
    keyword_ids(b, "granite")
    assert b.mirrors.held() == {"kb": 78} == {"kb": table_chunks(a)}
    assert not {d for d, _ in keyword_ids(b, "note", k=100)} & {"d3", "d4"}


def test_the_caught_up_mirror_scores_exactly_like_one_loaded_from_scratch(replicas, pgvector_url, store_prefix):
    """Removals come with their keyword text, so document frequencies (and so BM25's IDF) are as if the
    removed chunks had never been written."""
    a, b = replicas
    write(a, [doc(i) for i in range(30)])
    b.warm_keyword("kb")
    write(a, [doc(i, "granite granite") for i in range(30, 45)], delete=[f"d{i}" for i in range(0, 30, 2)])
    query = "granite lantern note"
    caught_up = b.keyword("kb", query, unit(1, 5)[0], 20, None)
    fresh = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM)
    fresh.open()
    try:
        fresh.warm_keyword("kb")
        loaded = fresh.keyword("kb", query, unit(1, 5)[0], 20, None)
    finally:
        fresh.close()
    assert [(h.doc_id, h.seq) for h in caught_up] == [(h.doc_id, h.seq) for h in loaded]
    assert np.allclose([h.keyword_score for h in caught_up], [h.keyword_score for h in loaded], rtol=1e-6)
    assert all(h.keyword_score and h.keyword_score > 0 for h in caught_up)


def test_a_mirror_far_behind_answers_from_sql_while_the_loader_catches_up(replicas):
    a, b = replicas
    write(a, [doc(i) for i in range(10)])
    b.warm_keyword("kb")
    b.mirrors.catch_up = 3  # a search applies at most 3 new chunks itself
    write(a, [doc(i, "zeppelin") for i in range(10, 20)])
    # The answer is right at once (the SQL leg), and the loader brings the mirror up to date meanwhile.
    assert {d for d, _ in keyword_ids(b, "zeppelin", k=50)} == {f"d{i}" for i in range(10, 20)}
    wait_for(lambda: b.mirrors.held().get("kb") == 40)
    assert {d for d, _ in keyword_ids(b, "zeppelin", k=50)} == {f"d{i}" for i in range(10, 20)}


def sql_leg_calls(monkeypatch) -> list[str]:
    """The indexes the SQL keyword leg was asked about from now on (a mirror that could not answer)."""
    from ragengine.stores.postgres import store as pg_store

    calls: list[str] = []
    real = pg_store.keyword_leg.search

    def recorded(conn, table, name, *args, **kwargs):
        calls.append(name)
        return real(conn, table, name, *args, **kwargs)

    monkeypatch.setattr(pg_store.keyword_leg, "search", recorded)
    return calls


def test_the_follower_keeps_a_mirror_in_step_without_any_search(replicas):
    """Issue 45: another replica's writes reach this replica's mirror by its follower, so a search under a steady
    writer finds little or nothing left to apply (before: every search that found the mirror behind caught up
    itself, and one that found another search at it answered from SQL)."""
    a, b = replicas
    write(a, [doc(i) for i in range(10)])
    b.warm_keyword("kb")
    write(a, [doc(i, "zeppelin") for i in range(10, 16)], delete=["d0"])
    wait_for(lambda: b.mirrors.held().get("kb") == 30)  # no search of b's meanwhile
    assert b.mirrors.applied["follower"] == 12 and b.mirrors.applied["search"] == 0


def test_a_search_waits_for_a_catch_up_already_running_instead_of_asking_sql(replicas, monkeypatch):
    """A search that needs a write while another thread is catching the mirror up waits for it (bounded by
    wait_s) and answers from memory (before: it answered from the SQL leg at once, 88 / 233 ms at a million)."""
    import threading

    a, b = replicas
    write(a, [doc(i) for i in range(10)])
    b.warm_keyword("kb")
    b.mirrors.wait_s = 60.0  # the test's own pace must not decide it
    sql = sql_leg_calls(monkeypatch)
    mirror = b.mirrors._mirrors["kb"]
    mirror.syncing.acquire()  # a catch-up in progress (the follower's, another search's)
    try:
        write(a, [doc(50, "zeppelin")])
        found: list = []
        search = threading.Thread(target=lambda: found.append(keyword_ids(b, "zeppelin")))
        search.start()
        search.join(timeout=0.5)
        assert search.is_alive() and not found  # waiting, not answered from SQL
    finally:
        mirror.syncing.release()
    search.join(timeout=30)
    assert set(found[0]) == {("d50", 0), ("d50", 1)} and sql == []


def test_a_search_applies_at_most_catch_up_chunks_itself(replicas, monkeypatch):
    """The bound on a search's own work: a backlog within ``catch_up`` chunks is applied by the search, a larger
    one is left to the loader while the SQL leg answers (correctly) meanwhile."""
    a, b = replicas
    b.mirrors.follow_s = 0  # no follower: only searches and the loader catch up here
    write(a, [doc(i) for i in range(10)])
    b.warm_keyword("kb")
    b.mirrors.catch_up = 4
    sql = sql_leg_calls(monkeypatch)
    write(a, [doc(20, "zeppelin")])  # 2 chunks: within the bound
    assert set(keyword_ids(b, "zeppelin")) == {("d20", 0), ("d20", 1)} and sql == []
    write(a, [doc(i, "zeppelin") for i in range(21, 26)])  # 10 chunks: over it
    assert {d for d, _ in keyword_ids(b, "zeppelin", k=50)} == {f"d{i}" for i in range(20, 26)} and sql == ["kb"]
    assert b.mirrors.largest_search_catch_up == 2 and b.mirrors.applied["search"] == 2
    wait_for(lambda: b.mirrors.held().get("kb") == 32)


def test_a_mirror_whose_removals_were_pruned_is_loaded_again(replicas):
    a, b = replicas
    write(a, [doc(i, "zeppelin") for i in range(6)])
    b.warm_keyword("kb")
    write(a, [], delete=["d0", "d1"])
    with a.engine.begin() as conn:  # the log entry is old: pruning takes it, so b cannot catch up from it
        conn.execute(text(f'UPDATE "{a.schema}".chunk_removals SET removed_at = now() - interval \'2 hours\''))
    assert a.mirrors.prune() == 1
    assert {d for d, _ in keyword_ids(b, "zeppelin")} == {"d2", "d3", "d4", "d5"}  # reloaded (small: at once)
    wait_for(lambda: b.mirrors.held().get("kb") == 8)
    assert {d for d, _ in keyword_ids(b, "zeppelin")} == {"d2", "d3", "d4", "d5"}


def test_an_index_dropped_and_made_again_is_never_answered_from_the_old_mirror(replicas):
    a, b = replicas
    write(a, [doc(i, "zeppelin") for i in range(4)])
    b.warm_keyword("kb")
    assert keyword_ids(b, "zeppelin")
    assert a.drop_index("kb")
    b.maintain()  # the background upkeep forgets what was dropped elsewhere: no memory held for it
    assert b.mirrors.held() == {}
    with pytest.raises(NoSuchIndex):  # the registry's 404
        b.keyword("kb", "zeppelin", unit(1, 1)[0], 10, None)
    write(a, [doc(50, "lighthouse")])
    assert keyword_ids(b, "zeppelin") == []
    assert set(keyword_ids(b, "lighthouse")) == {("d50", 0), ("d50", 1)}


def test_filtered_keyword_searches_still_return_k_hits_where_k_exist(replicas):
    a, b = replicas
    write(a, [doc(i, "zeppelin") for i in range(30)])
    b.warm_keyword("kb")
    flt = parse_filters({"type": "gte", "key": "i", "value": 20})
    hits = b.keyword("kb", "zeppelin", unit(1, 2)[0], 10, flt)
    assert len(hits) == 10 and all(h.metadata["i"] >= 20 for h in hits)


def test_counts_are_kept_in_the_index_row_through_adds_updates_and_deletes(replicas):
    a, b = replicas
    write(a, [doc(i) for i in range(12)])
    write(a, [doc(i, "again") for i in range(3)], delete=["d0", "d1", "d2"])
    write(a, [], delete=["d5", "missing"])
    a.write("kb", {}, [], [doc(7)], unit(2, 1), add_only=True)  # already held with that text: skipped
    with a.engine.connect() as conn:
        docs = conn.execute(select(func.count()).select_from(a.t.documents)).scalar_one()
    assert b.counts() == {"kb": (docs, table_chunks(a))} == {"kb": (11, 22)}


def test_the_keyword_index_caps_a_long_query_at_its_rarest_terms():
    bm25 = BM25Index()
    texts = ["common word here"] * 50 + ["rare needle here"]
    for slot, t in enumerate(texts):
        bm25.add(slot, t)
    query = "common " * 3000 + "word needle"
    slots, _ = bm25.search(query, 5, None, max_terms=1)
    assert slots.tolist() == [50]  # the one term kept is the rarest ("needle"), not the repeated common one
    slots, _ = bm25.search(query, 60, None, max_terms=3)
    assert len(slots) == 51
    slots, _ = bm25.search(query, 60, None, max_postings=10)  # "common" and "word" have 50 postings each
    assert slots.tolist() == [50]
    slots, _ = bm25.search("common word", 60, None, max_postings=10)  # the rarest term is always scored
    assert len(slots) == 50
