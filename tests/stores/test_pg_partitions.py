"""PostgreSQL keeps each index's chunks in a table of its own: written by COPY, searched exactly until it
outgrows ``hnsw_threshold``, then given an HNSW index built in one pass (never row by row during a load);
dropped as a table; and a database made before the partitioning (revision 0002) is converted with its data.
A real PostgreSQL 18 with pgvector throughout."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import text

from ragengine.retrieval.filters import parse_filters
from ragengine.stores.base import ChunkWrite, DocWrite
from ragengine.stores.postgres.schema import hnsw_name, leaf_name
from ragengine.stores.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres
DIM = 8


def vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def docs(n: int, start: int = 0) -> list[DocWrite]:
    return [DocWrite(f"d{i}", f"document {i}", {"even": i % 2 == 0}, [ChunkWrite(0, f"chunk {i} word{i % 7}")])
            for i in range(start, start + n)]


def hnsw_of(store: PostgresStore, name: str) -> list[tuple[str, bool]]:
    """(index name, valid) of the HNSW indexes on ``name``'s table."""
    leaf = leaf_name("chunks", name)
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT ic.relname, x.indisvalid FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid "
            "JOIN pg_class c ON c.oid = x.indrelid JOIN pg_am am ON am.oid = ic.relam "
            "WHERE c.oid = to_regclass(:leaf) AND am.amname = 'hnsw'"), {"leaf": f'"{store.schema}"."{leaf}"'})]


@pytest.fixture
def store(pgvector_url, store_prefix):
    s = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM, hnsw_threshold=100, ef_search=200)
    s.open()
    yield s
    s.close()


def test_a_bulk_load_gets_its_hnsw_index_after_the_load_and_finds_what_exact_search_found(store):
    vecs = vectors(600)
    for start in range(0, 600, 200):  # three writes, as a bulk import sends them
        store.write("kb", {}, [], docs(200, start), vecs[start:start + 200], add_only=True)
        assert hnsw_of(store, "kb") == []  # no HNSW upkeep while the load goes on
    queries = vectors(20, seed=1)
    exact = [[h.doc_id for h in store.dense("kb", q, 10, None)] for q in queries]
    truth = [[f"d{i}" for i in np.argsort(-(vecs @ q))[:10]] for q in queries]
    assert exact == truth  # below the HNSW index, a scan of the index's table: exact

    assert store.build_hnsw("kb")
    assert hnsw_of(store, "kb") == [(hnsw_name(leaf_name("chunks", "kb")), True)]
    found = [[h.doc_id for h in store.dense("kb", q, 10, None)] for q in queries]
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth, strict=True)])
    assert recall >= 0.95, recall
    even = parse_filters({"type": "eq", "key": "even", "value": True})
    hits = store.dense("kb", queries[0], 50, even)
    assert len(hits) == 50 and all(int(h.doc_id[1:]) % 2 == 0 for h in hits)  # filtered: still k where k exist

    store.write("kb", {}, [], docs(5, 600), vectors(5, seed=2), add_only=True)  # later writes keep it up to date
    assert store.dense("kb", vectors(5, seed=2)[3], 1, None)[0].doc_id == "d603"


def test_small_indexes_get_no_hnsw_index_and_each_index_has_its_own(store):
    store.write("small", {}, [], docs(50), vectors(50), add_only=True)
    store.write("big", {}, [], docs(150), vectors(150, seed=3), add_only=True)
    assert not store.build_hnsw("small") and hnsw_of(store, "small") == []
    assert store.build_hnsw("big") and hnsw_of(store, "big")
    assert {h.doc_id for h in store.dense("small", vectors(50)[7], 1, None)} == {"d7"}  # no mix of indexes
    assert store.counts() == {"small": (50, 50), "big": (150, 150)}


def all_visible(store: PostgresStore, name: str) -> tuple[int, int]:
    """(pages, pages marked all-visible) of ``name``'s table, as its last VACUUM left them."""
    with store.engine.connect() as conn:
        return tuple(conn.execute(text("SELECT relpages, relallvisible FROM pg_class WHERE oid = to_regclass(:t)"),
                                  {"t": f'"{store.schema}"."{leaf_name("chunks", name)}"'}).one())


def test_a_finished_load_leaves_its_table_vacuumed_so_searches_and_autovacuum_do_not_do_it(store):
    """A bulk load's rows carry no hint bits and no visibility map: the first searches that read each page
    would set them (writing the page), and an autovacuum would start on the new rows while they search.
    Finishing the load does both at once, over the threshold (with the HNSW build) and under it."""
    store.write("big", {}, [], docs(3000), vectors(3000), add_only=True)
    store.write("small", {}, [], docs(50), vectors(50, seed=3), add_only=True)
    assert all_visible(store, "big")[1] == 0  # as the load left it
    assert store.build_hnsw("big") and not store.build_hnsw("small")
    for name in ("big", "small"):
        pages, visible = all_visible(store, name)
        assert pages > 0 and visible == pages, (name, pages, visible)


def test_the_background_upkeep_builds_once_writes_pause(store):
    store.write("kb", {}, [], docs(300), vectors(300), add_only=True)
    deadline, built = time.monotonic() + 60, []
    while not built and time.monotonic() < deadline:  # the statistics reach the server within a second or so
        built = store.maintain(quiet_s=0)
        time.sleep(0.3)
    assert built == [leaf_name("chunks", "kb")] and hnsw_of(store, "kb")
    assert store.maintain(quiet_s=0) == []  # nothing left to build


def test_a_build_killed_midway_is_replaced(store):
    """A CREATE INDEX CONCURRENTLY that dies leaves an invalid index; the next build drops it first."""
    store.write("kb", {}, [], docs(300), vectors(300), add_only=True)
    leaf = leaf_name("chunks", "kb")
    with store.engine.connect() as conn:
        conn.execute(text(f'CREATE INDEX "{hnsw_name(leaf)}" ON "{store.schema}"."{leaf}" USING hnsw '
                          "(embedding vector_cosine_ops)"))
        conn.execute(text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(:i)"),
                     {"i": f'"{store.schema}"."{hnsw_name(leaf)}"'})
        conn.commit()
    assert hnsw_of(store, "kb") == [(hnsw_name(leaf), False)]
    assert store.build_hnsw("kb")
    assert hnsw_of(store, "kb") == [(hnsw_name(leaf), True)]


def test_dropping_an_index_drops_its_table(store):
    store.write("kb", {}, [], docs(20), vectors(20), add_only=True)
    leaf = leaf_name("chunks", "kb")
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": f'"{store.schema}"."{leaf}"'}).scalar()
    assert store.drop_index("kb")
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": f'"{store.schema}"."{leaf}"'}).scalar() is None
    assert store.indexes() == {}
    store.write("kb", {}, [], docs(3), vectors(3), add_only=True)  # made again: a fresh table
    assert store.counts() == {"kb": (3, 3)}


def test_index_names_with_quotes_and_percent_signs_get_their_tables(store):
    name = "it's 100% \"odd\"; DROP TABLE x --"
    store.write(name, {}, [], docs(3), vectors(3), add_only=True)
    assert store.counts() == {name: (3, 3)}
    assert store.drop_index(name) and store.indexes() == {}


LEGACY = """
CREATE TABLE {s}.indexes (name text PRIMARY KEY, config jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), dim integer);
CREATE TABLE {s}.documents (index_name text REFERENCES {s}.indexes (name) ON DELETE CASCADE, doc_id text,
    pos bigint GENERATED BY DEFAULT AS IDENTITY NOT NULL, text text NOT NULL, metadata jsonb NOT NULL,
    PRIMARY KEY (index_name, doc_id));
CREATE TABLE {s}.chunks (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, index_name text NOT NULL,
    doc_id text NOT NULL, seq integer NOT NULL, text text NOT NULL, search_text text NOT NULL,
    metadata jsonb NOT NULL, embedding vector({dim}) NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', search_text)) STORED,
    FOREIGN KEY (index_name, doc_id) REFERENCES {s}.documents (index_name, doc_id) ON DELETE CASCADE);
CREATE INDEX chunks_doc ON {s}.chunks (index_name, doc_id);
CREATE INDEX chunks_tsv ON {s}.chunks USING gin (tsv);
CREATE INDEX chunks_embedding_hnsw ON {s}.chunks USING hnsw (embedding vector_cosine_ops);
CREATE TABLE {s}.chunks_d4 (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, index_name text NOT NULL,
    doc_id text NOT NULL, seq integer NOT NULL, text text NOT NULL, search_text text NOT NULL,
    metadata jsonb NOT NULL, embedding vector(4) NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', search_text)) STORED,
    FOREIGN KEY (index_name, doc_id) REFERENCES {s}.documents (index_name, doc_id) ON DELETE CASCADE);
CREATE INDEX chunks_d4_doc ON {s}.chunks_d4 (index_name, doc_id);
CREATE INDEX chunks_d4_tsv ON {s}.chunks_d4 USING gin (tsv);
CREATE INDEX chunks_d4_embedding_hnsw ON {s}.chunks_d4 USING hnsw (embedding vector_cosine_ops);
CREATE TABLE {s}.index_versions (name text PRIMARY KEY, book jsonb NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE {s}.alembic_version (version_num varchar(32) PRIMARY KEY);
INSERT INTO {s}.alembic_version VALUES ('0002');
"""


def test_a_database_from_before_the_partitioning_is_converted_with_its_data(pgvector_url, store_prefix):
    """Revision 0002's one ``chunks`` table (and a ``chunks_d4`` of another model) become partitioned tables,
    every chunk kept with its id and vector; writes and searches go on, new chunks get new ids."""
    from sqlalchemy import create_engine

    from ragengine.stores.postgres.store import sqlalchemy_url

    s = f'"{store_prefix}"'
    legacy = create_engine(sqlalchemy_url(pgvector_url))
    vecs = vectors(30)
    with legacy.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        conn.execute(text(f"CREATE SCHEMA {s}"))
        for statement in LEGACY.format(s=s, dim=DIM).split(";"):
            if statement.strip():
                conn.execute(text(statement))
        for name, dim in (("a", None), ("b", None), ("other", 4)):
            conn.execute(text(f"INSERT INTO {s}.indexes (name, config, dim) VALUES (:n, '{{}}', :d)"), {"n": name, "d": dim})
        for i in range(30):
            name = "a" if i < 20 else "b"
            conn.execute(text(f"INSERT INTO {s}.documents (index_name, doc_id, text, metadata) "
                              "VALUES (:n, :d, 'text', '{}')"), {"n": name, "d": f"d{i}"})
            conn.execute(text(f"INSERT INTO {s}.chunks (index_name, doc_id, seq, text, search_text, metadata, embedding) "
                              "VALUES (:n, :d, 0, :t, :t, '{}', :e)"),
                         {"n": name, "d": f"d{i}", "t": f"chunk {i}", "e": str(vecs[i].tolist())})
        conn.execute(text(f"INSERT INTO {s}.documents (index_name, doc_id, text, metadata) VALUES ('other', 'o', 't', '{{}}')"))
        conn.execute(text(f"INSERT INTO {s}.chunks_d4 (index_name, doc_id, seq, text, search_text, metadata, embedding) "
                          "VALUES ('other', 'o', 0, 'small model', 'small model', '{}', '[1,0,0,0]')"))
        ids = dict(conn.execute(text(f"SELECT doc_id, id FROM {s}.chunks")).all())
    legacy.dispose()

    store = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM, hnsw_threshold=10)
    store.open()
    try:
        with store.engine.connect() as conn:
            kinds = dict(conn.execute(text(
                "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relname IN ('chunks', 'chunks_d4', 'chunks_0002')"), {"s": store_prefix}).all())
            assert kinds == {"chunks": "p", "chunks_d4": "p"}  # partitioned; the old tables gone
            assert dict(conn.execute(text(f"SELECT doc_id, id FROM {s}.chunks")).all()) == ids
        assert store.counts() == {"a": (20, 20), "b": (10, 10), "other": (1, 1)}
        assert [h.doc_id for h in store.dense("a", vecs[4], 1, None)] == ["d4"]
        assert [h.doc_id for h in store.keyword("b", "chunk 25", vecs[25], 1, None)] == ["d25"]
        assert [h.doc_id for h in store.dense("other", np.array([1, 0, 0, 0], np.float32), 1, None)] == ["o"]
        store.write("a", {}, [], docs(2, 100), vectors(2, seed=9), add_only=True)
        with store.engine.connect() as conn:
            new = conn.execute(text(f"SELECT min(id) FROM {s}.chunks WHERE doc_id IN ('d100', 'd101')")).scalar()
        assert new > max(ids.values())
        assert store.counts()["a"] == (22, 22)  # migration 0004 filled the counts; the write kept them
        assert store.build_hnsw("a") and hnsw_of(store, "a")  # the converted leaves get HNSW like any other
    finally:
        store.close()


BULK_WRITER = """
import sys
import numpy as np
from ragengine.stores.base import ChunkWrite, DocWrite
from ragengine.stores.postgres.store import PostgresStore

url, schema, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = PostgresStore(url, schema=schema, dim=8)
store.open()
store.write("kb", {}, [], [DocWrite("small", "t", {}, [ChunkWrite(0, "acknowledged")])],
            np.ones((1, 8), np.float32), add_only=True)
print("acked", flush=True)
rng = np.random.default_rng(0)
docs = [DocWrite(f"d{i}", "t", {}, [ChunkWrite(j, f"chunk {j} of {i}") for j in range(10)]) for i in range(n)]
vectors = rng.standard_normal((n * 10, 8)).astype(np.float32)
print("copying", flush=True)
store.write("kb", {}, [], docs, vectors, add_only=True)
print("done", flush=True)
"""


def test_kill_9_in_the_middle_of_a_bulk_copy_leaves_nothing_half_written(pgvector_url, store_prefix, tmp_path):
    """One write of 200,000 chunks is one transaction: killed during its COPY, none of its documents or
    chunks is visible afterwards, and the write acknowledged before it is all there."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "bulk_writer.py"
    script.write_text(BULK_WRITER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["engine", "operator", os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), pgvector_url, store_prefix, "20000"], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "acked"
    assert proc.stdout.readline().strip() == "copying"
    store = PostgresStore(pgvector_url, schema=store_prefix, dim=DIM)
    store.open()
    try:
        # wait until the COPY is under way, then kill the writer (autocommit: a transaction would see one
        # snapshot of the statistics views)
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not conn.execute(text(
                    "SELECT 1 FROM pg_stat_progress_copy p JOIN pg_stat_activity a ON a.pid = p.pid "
                    "WHERE p.tuples_processed > 1000")).first():
                time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL  # killed mid-write, not finished
        deadline = time.monotonic() + 30  # the server notices the dead client and rolls back
        while time.monotonic() < deadline and store.counts()["kb"] != (1, 1):
            time.sleep(0.1)
        assert store.counts() == {"kb": (1, 1)}
        assert store.get_documents("kb", ["small", "d0", "d19999"]).keys() == {"small"}
    finally:
        store.close()


def test_dropping_an_index_stops_its_running_hnsw_build(store):
    """A build (CREATE INDEX CONCURRENTLY) holds the table while it waits for older transactions to end; a
    drop of the index cancels it and goes through at once, instead of waiting for it or deadlocking with it
    (seen in bench/bench_stores.py: a background build and a DROP, one of them ended by PostgreSQL)."""
    import threading

    from sqlalchemy.engine import Connection

    from ragengine.stores.base import StoreUnavailable

    store.write("kb", {}, [], docs(300), vectors(300), add_only=True)
    leaf = leaf_name("chunks", "kb")
    blocker: Connection = store.engine.connect().execution_options(isolation_level="REPEATABLE READ")
    blocker.execute(text("SELECT 1"))  # an open snapshot: the build's last phase waits for it
    built: list[object] = []

    def build() -> None:
        try:
            built.append(store.build_hnsw("kb"))
        except StoreUnavailable as exc:
            built.append(exc)

    builder = threading.Thread(target=build)
    dropper = threading.Thread(target=lambda: built.append(("dropped", store.drop_index("kb"))))
    try:
        builder.start()
        end = time.monotonic() + 20
        def waiting() -> bool:  # a connection each time: pg_stat_activity is read once per transaction
            with store.engine.connect() as conn:
                return conn.execute(text("SELECT 1 FROM pg_stat_activity WHERE query ILIKE 'CREATE INDEX "
                                         "CONCURRENTLY%' AND wait_event_type = 'Lock'")).first() is not None

        while not waiting():
            assert time.monotonic() < end, "the build never started waiting"
            time.sleep(0.05)
        dropper.start()
        dropper.join(timeout=15)
        assert not dropper.is_alive(), "the drop waited for the build"
    finally:
        blocker.close()
        dropper.join(timeout=30) if dropper.is_alive() else None
        builder.join(timeout=30)
    assert ("dropped", True) in built
    assert any(isinstance(b, StoreUnavailable) for b in built)  # the build was cancelled, not finished
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": f'"{store.schema}"."{leaf}"'}).scalar() is None
    assert store.indexes() == {}


def test_a_write_and_a_new_index_s_table_made_at_the_same_time_never_deadlock(store):
    """Making a new index's table locks ``chunks`` and then ``documents`` (the foreign key); a write to another
    index locked ``documents`` (its COPY) and then ``chunks`` (its COPY into its own table checks the partition).
    Met halfway, PostgreSQL ended one of them with "deadlock detected" (seen in CI: an upload to a new vector
    store failed while a session file was indexed). Every write now takes ``chunks`` first. A third connection
    holding ``chunks`` lines the two up in the order that deadlocked."""
    import threading

    store.write("old", {}, [], docs(5), vectors(5), add_only=True)
    holder = store.engine.connect()
    holder.execute(text(f'LOCK TABLE ONLY "{store.schema}".chunks IN ACCESS EXCLUSIVE MODE'))
    results: dict[str, object] = {}

    def write(name: str, seed: int) -> None:
        try:
            store.write(name, {}, [], docs(5, 100 * seed), vectors(5, seed=seed), add_only=True)
            results[name] = "written"
        except Exception as exc:  # the outcome is the assertion
            results[name] = exc

    def waiters() -> int:
        with store.engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = "
                                     "to_regclass(:t)"), {"t": f'"{store.schema}".chunks'}).scalar()

    def wait_for(n: int) -> None:
        end = time.monotonic() + 20
        while waiters() < n:
            assert time.monotonic() < end, f"never {n} waiting on chunks"
            time.sleep(0.02)

    maker = threading.Thread(target=write, args=("new", 1))  # its table is made first
    writer = threading.Thread(target=write, args=("old", 2))
    try:
        maker.start()
        wait_for(1)
        writer.start()
        wait_for(2)
    finally:
        holder.rollback()
        holder.close()
    for t in (maker, writer):
        t.join(timeout=30)
        assert not t.is_alive()
    assert results == {"new": "written", "old": "written"}, results
    assert store.counts() == {"old": (10, 10), "new": (5, 5)}
