"""FAISS store, BM25, journal and snapshot internals (real FAISS, no model needed)."""

from __future__ import annotations

import numpy as np
import pytest

from ragengine.index.journal import Journal, JournalCorrupt
from ragengine.index.snapshot import SnapshotError, read_snapshot, write_snapshot
from ragengine.index.state import IndexState
from ragengine.index.store import VectorStore
from ragengine.index.types import ChunkingConfig, kaito_l2_to_score
from ragengine.retrieval.bm25 import BM25Index
from ragengine.retrieval.hybrid import rrf

DIM = 16


def unit(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exact_top(x: np.ndarray, q: np.ndarray, k: int, ok: np.ndarray) -> list[int]:
    sims = x @ q
    sims[~ok] = -np.inf
    return [int(i) for i in np.argsort(-sims)[:k] if ok[i]]


@pytest.mark.parametrize("threshold", [10_000, 100])  # flat, then HNSW
def test_search_deletes_and_filters_are_exact(threshold):
    x = unit(2000)
    store = VectorStore.from_vectors(x, hnsw_threshold=threshold, ef_search=64, ef_construction=80)
    assert store.kind == ("flat" if threshold > 2000 else "hnsw")
    q = x[7]
    slots, cos = store.search(q, 5)
    assert slots[0] == 7 and abs(cos[0] - 1.0) < 1e-5
    store.remove([7, 8, 9])
    slots, _ = store.search(q, 5)
    assert 7 not in slots and len(slots) == 5
    allowed = np.zeros(2000, bool)
    allowed[[3, 500, 1999, 8]] = True  # 8 is deleted: never returned
    slots, _ = store.search(q, 10, allowed)
    assert sorted(slots) == [3, 500, 1999]
    assert list(slots) == exact_top(x, q, 3, allowed & store.alive[:2000])
    # A broad filter through HNSW still returns k allowed hits, best first.
    allowed = np.arange(2000) % 3 == 0
    slots, _ = store.search(q, 10, allowed)
    assert len(slots) == 10 and all(s % 3 == 0 for s in slots)


def test_score_mapping_from_kaito_distance():
    assert kaito_l2_to_score(0.0) == 1.0
    assert kaito_l2_to_score(2.0) == 0.0
    assert abs(kaito_l2_to_score(0.4806) - (1 - 0.4806 / 2)) < 1e-9


def test_bm25_is_incremental():
    bm = BM25Index()
    bm.add(0, "the quick brown fox")
    bm.add(1, "lazy dogs sleep all day")
    bm.add(2, "foxes and dogs are animals")
    alive = np.ones(3, bool)
    slots, scores = bm.search("dog", 10, alive)
    assert set(slots.tolist()) == {1, 2} and (scores > 0).all()
    bm.remove(1, "lazy dogs sleep all day")
    alive[1] = False
    slots, _ = bm.search("dog", 10, alive)
    assert slots.tolist() == [2]
    bm.add(3, "dog dog dog")
    alive = np.ones(4, bool)
    alive[1] = False
    slots, _ = bm.search("dog", 10, alive)
    assert slots.tolist()[0] == 3
    assert bm.search("unknownword", 10, alive)[0].size == 0


def test_rrf_fuses_ranks():
    fused = [i for i, _ in rrf([1, 2, 3], [3, 4])]
    assert fused[0] == 3 and set(fused) == {1, 2, 3, 4}


def _state(tmp_path, n=50, threshold=10_000) -> IndexState:
    state = IndexState("t", DIM, ChunkingConfig(), {"hnsw_threshold": threshold})
    x = unit(n)
    adds = [{"id": f"d{i}", "text": f"text {i}", "meta": {"i": i}, "spans": [[0, len(f"text {i}")]]} for i in range(n)]
    state.apply({"add": adds}, x)
    state.seq = 1
    return state


def test_journal_torn_tail_and_corruption(tmp_path):
    path = tmp_path / "journal.log"
    j = Journal(path, DIM)
    for seq in range(1, 4):
        j.append(seq, {"add": [], "n": seq}, unit(2, seq))
    j.close()
    good_size = path.stat().st_size
    # A crash mid-append leaves half a record: dropped and truncated, earlier records kept.
    with open(path, "ab") as fh:
        fh.write(b"RGJ1\x10\x00")
    records = list(Journal(path, DIM).read())
    assert [r.seq for r in records] == [1, 2, 3] and path.stat().st_size == good_size
    np.testing.assert_allclose(records[1].vectors, unit(2, 2))
    # A flipped byte in the middle is corruption, not a torn tail.
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt):
        list(Journal(path, DIM).read())


def test_snapshot_roundtrip_and_checksum(tmp_path):
    state = _state(tmp_path)
    state.apply({"delete": ["d3"]}, None)
    write_snapshot(state, tmp_path / "snap")
    loaded = read_snapshot(tmp_path / "snap", "t2", DIM, {"hnsw_threshold": 10_000})
    assert loaded.n_docs == 49 and loaded.n_chunks == 49 and "d3" not in loaded.docs
    q = unit(50)[10]
    assert loaded.store.search(q, 1)[0][0] == state.store.search(q, 1)[0][0]
    (tmp_path / "snap" / "alive.bin").write_bytes(b"\x01" * 50)
    with pytest.raises(SnapshotError, match="checksum"):
        read_snapshot(tmp_path / "snap", "t2", DIM, {"hnsw_threshold": 10_000})
    with pytest.raises(SnapshotError, match="dimension"):
        write_snapshot(state, tmp_path / "snap2")
        read_snapshot(tmp_path / "snap2", "t2", DIM + 1, {"hnsw_threshold": 10_000})


def test_compaction_keeps_results(tmp_path):
    state = _state(tmp_path, n=300, threshold=100)
    assert state.store.kind == "flat"  # apply() never migrates; the registry does
    state.apply({"delete": [f"d{i}" for i in range(0, 300, 2)]}, None)
    q = unit(300)[11]
    before = [state.chunk(int(s))[0].doc_id for s in state.store.search(q, 5)[0]]
    state.compact()
    assert state.store.ntotal == 150 and state.tombstones() == 0 and state.store.kind == "hnsw"
    after = [state.chunk(int(s))[0].doc_id for s in state.store.search(q, 5)[0]]
    assert before == after
    slots, _ = state.bm25.search("text 11", 3, state.store.alive)
    assert state.chunk(int(slots[0]))[0].doc_id == "d11"


def test_sq8_keeps_a_quarter_of_the_memory_and_finds_what_exact_search_finds(tmp_path):
    """compression="sq8": the HNSW index holds 8-bit codes. Searches, filters, deletes, cosines and a snapshot
    round trip behave as with float vectors; the scores are the decoded vectors' (close to the exact ones)."""
    x = unit(3000, seed=4)
    plain = VectorStore.from_vectors(x, hnsw_threshold=100, ef_search=128)
    sq8 = VectorStore.from_vectors(x, hnsw_threshold=100, ef_search=128, compression="sq8")
    assert sq8.kind == "hnsw" and sq8.compressed and not plain.compressed
    assert sq8.memory_bytes() - 3000 * 32 * 2 * 4 == (plain.memory_bytes() - 3000 * 32 * 2 * 4) // 4
    queries = unit(50, seed=5)
    truth = [exact_top(x, q, 10, np.ones(3000, bool)) for q in queries]
    found = [list(sq8.search(q, 10)[0]) for q in queries]
    assert np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth, strict=True)]) >= 0.9
    slots, cos = sq8.search(queries[0], 5)
    assert np.allclose(cos, x[slots] @ queries[0], atol=0.02)
    assert np.allclose(sq8.cosines(queries[0], slots), cos, atol=1e-4)
    assert np.allclose(sq8.vectors_at([3, 7]), x[[3, 7]], atol=0.02)
    allowed = np.zeros(3000, bool)
    allowed[[11, 2500]] = True  # selective: the exact scan over decoded vectors
    assert sorted(sq8.search(queries[1], 10, allowed)[0]) == [11, 2500]
    sq8.remove([int(slots[0])])
    assert int(slots[0]) not in sq8.search(queries[0], 5)[0]
    sq8.write(str(tmp_path / "v.faiss"))
    loaded = VectorStore(DIM, hnsw_threshold=100, compression="sq8")
    loaded.load_index(str(tmp_path / "v.faiss"), sq8.alive[:3000])
    assert loaded.compressed and list(loaded.search(queries[2], 5)[0]) == list(sq8.search(queries[2], 5)[0])
    with pytest.raises(ValueError, match="compression"):
        VectorStore(DIM, hnsw_threshold=100, compression="pq")


@pytest.mark.parametrize(("built", "setting"), [("none", "sq8"), ("sq8", "none")])
def test_an_hnsw_index_keeps_the_vector_format_it_was_built_with(tmp_path, built, setting):
    """A changed ``vector_compression`` (the default moved from none to sq8) never converts an HNSW index on disk:
    read back and compacted, it keeps its format; only a new HNSW build (a flat index outgrowing the threshold, a
    new index or version) takes the setting."""
    state = IndexState("t", DIM, ChunkingConfig(), {"hnsw_threshold": 100, "compression": built})
    adds = [{"id": f"d{i}", "text": f"text {i}", "meta": {}, "spans": [[0, len(f"text {i}")]]} for i in range(300)]
    state.apply({"add": adds}, unit(300))
    state.store.replace(state.store.build_hnsw(state.store.vectors()), state.store.alive[:300])  # the registry's migration
    state.seq = 1
    write_snapshot(state, tmp_path / "snap")
    loaded = read_snapshot(tmp_path / "snap", "t", DIM, {"hnsw_threshold": 100, "compression": setting})
    assert loaded.store.kind == "hnsw" and loaded.store.compressed == (built == "sq8")
    loaded.apply({"delete": [f"d{i}" for i in range(0, 300, 2)]}, None)
    loaded.compact()
    assert loaded.store.kind == "hnsw" and loaded.store.compressed == (built == "sq8")
    fresh = IndexState("u", DIM, ChunkingConfig(), {"hnsw_threshold": 100, "compression": setting})
    fresh.apply({"add": adds}, unit(300))
    fresh.compact()  # a new index past the threshold: built with the setting
    assert fresh.store.kind == "hnsw" and fresh.store.compressed == (setting == "sq8")


def test_node_ids_are_uuid5_of_the_document_position_and_text():
    """node_id writes out uuid5 by hand (issue 45: a hundred a chat turn); ids stored before must not change."""
    import uuid

    from ragengine.index.state import _NODE_NS, node_id

    for doc, seq, text in [("d", 0, ""), ("doc-1", 7, "naïve text\nwith lines"), ("x" * 300, 10**6, "🙂" * 50)]:
        assert node_id(doc, seq, text) == str(uuid.uuid5(_NODE_NS, f"{doc}\x00{seq}\x00{text}"))
