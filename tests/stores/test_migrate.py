"""``ragengine migrate``: FAISS indexes (snapshot + journal) copied into PostgreSQL with their vectors."""

from __future__ import annotations

import asyncio

import numpy as np
from click.testing import CliRunner

from ragengine.cli import main
from ragengine.index.registry import IndexRegistry
from ragengine.settings import EngineSettings
from ragengine.stores.postgres.store import PostgresStore

DOCS = [
    {"doc_id": "journal", "text": "Every write is appended to an fsync'ed journal before it is applied.", "metadata": {"t": 1}},
    {"doc_id": "hnsw", "text": "Indexes above the threshold move from a flat index to HNSW. " * 40, "metadata": {"t": 2}},
    {"doc_id": "code", "text": "def f(x):\n    return x + 1\n", "metadata": {"split_type": "code", "language": "python"}},
]


def _faiss_data_dir(tmp_path, embedder):
    """A real engine data directory: one index snapshotted, one only in its journal."""
    settings = EngineSettings(data_dir=tmp_path / "data")

    async def build() -> dict:
        registry = IndexRegistry(settings, embedder)
        await registry.start()
        await registry.add_documents("kb", DOCS)
        await registry.add_documents("notes", [{"doc_id": "n1", "text": "A note kept only in the journal."}])
        state = registry.get("kb")
        vectors = {rec.doc_id: np.array(state.store.vectors()[rec.slots]) for rec in state.docs.values()}
        await registry.durability.snapshot(state)  # kb from its snapshot; notes from its journal
        for s in (registry.get("kb"), registry.get("notes")):
            s.journal.close()
        return vectors

    return settings.data_dir, asyncio.run(build())


def test_migrate_copies_documents_chunks_and_vectors_and_resumes(tmp_path, embedder, pgvector_url, store_prefix):
    data_dir, vectors = _faiss_data_dir(tmp_path, embedder)
    args = ["migrate", "--from", f"faiss:{data_dir}", "--to", pgvector_url, "--prefix", store_prefix]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert "kb: 3 documents" in first.output and "notes: 1 documents" in first.output

    target = PostgresStore(pgvector_url, schema=store_prefix, dim=embedder.dim)
    target.open()
    assert set(target.indexes()) == {"kb", "notes"}
    held = target.get_documents("kb", ["journal", "hnsw", "code"])
    assert {d: held[d].text for d in held} == {d["doc_id"]: d["text"] for d in DOCS}
    chunks, stored = target.chunk_vectors("kb", "hnsw")
    assert len(chunks) == len(vectors["hnsw"]) > 1  # the long document kept all its chunks, in order
    assert np.allclose(stored, vectors["hnsw"], atol=1e-6)  # the same vectors: nothing re-embedded

    again = CliRunner().invoke(main, args)  # resumable: a second run copies nothing
    assert again.exit_code == 0 and "kb: 0 documents (0 chunks) copied, 3 already there" in again.output
    assert target.counts()["kb"][0] == 3
    target.close()


def test_migrate_reports_bad_source_and_target(tmp_path, pgvector_url):
    r = CliRunner().invoke(main, ["migrate", "--from", f"faiss:{tmp_path}", "--to", pgvector_url])
    assert r.exit_code != 0 and "no indexes/ folder" in r.output
    r = CliRunner().invoke(main, ["migrate", "--from", str(tmp_path), "--to", pgvector_url])
    assert r.exit_code != 0 and "expected faiss:DATA_DIR" in r.output


def test_migrate_copies_each_index_live_version_with_its_model(tmp_path, embedder, pgvector_url, store_prefix):
    """After a re-index the live version is "<name>/v2" on disk: it is what is copied, under the index's name,
    with a version book naming its model; the retired version stays behind."""
    from ragengine.versions import build_registry

    settings = EngineSettings(data_dir=tmp_path / "data")

    async def build() -> None:
        registry = build_registry(settings, embedder)
        await registry.start()
        await registry.add_documents("kb", DOCS)
        await registry.reindex("kb", None, "wordllama:l2_supercat")
        book = await registry.wait_idle("kb", 120)
        assert book.live == 2 and book.live_version.physical == "kb/v2"
        await registry.close()

    asyncio.run(build())
    out = CliRunner().invoke(main, ["migrate", "--from", f"faiss:{settings.data_dir}", "--to", pgvector_url,
                                    "--prefix", store_prefix])
    assert out.exit_code == 0, out.output
    assert "kb: 3 documents" in out.output and "kb/v" not in out.output
    target = PostgresStore(pgvector_url, schema=store_prefix, dim=embedder.dim)
    target.open()
    assert set(target.indexes()) == {"kb"} and target.dim_of("kb") == 256
    book = target.books()["kb"]
    assert book["live"] == 1 and book["versions"][0]["model"] == "wordllama:l2_supercat"
    target.close()
