"""Export an index from each store and import it into each of the three (FAISS, PostgreSQL, Milvus Lite):
ids, texts, metadata, chunks and retrieval results come back identical, and the vectors bit for bit when the
model is the same. With another model the texts are embedded again. A truncated file, a flipped byte, a
wrong format version are refused, and nothing is left behind. ``ragengine export`` / ``import`` too."""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from ragengine.settings import EngineSettings
from tests.support.stores import STORES, store_values

DOCS = [{"doc_id": f"d{i}", "text": f"Chapter {i}. The lighthouse keeper logs the {['fog', 'storm', 'tide'][i % 3]} "
         f"at {i} o'clock. " + " ".join(f"Line {j} of the log for hour {i}." for j in range(i % 4 * 20)),
         "metadata": {"i": i, "kind": ["fog", "storm", "tide"][i % 3], "tags": ["log", str(i)]}} for i in range(40)]
QUERIES = ["when does the fog come", "storm at night", "tide log hour 7"]


@contextlib.contextmanager
def _engine(embedder, kind: str, work: Path, request, prefix: str, **settings):
    from ragengine.app import create_app
    from tests.support.embedding import serve_engine
    from tests.support.server import serve_app

    values = store_values(kind, prefix=prefix, work_dir=work, pg_url=lambda: request.getfixturevalue("pgvector_url"))
    work.mkdir(parents=True, exist_ok=True)
    app = create_app(EngineSettings(data_dir=work / "data", **values, **settings))
    with serve_engine(app, embedder) if embedder is not None else serve_app(app) as base:
        yield base, app


def _export(base: str, index: str = "kb") -> bytes:
    resp = httpx.get(f"{base}/indexes/{index}/export", timeout=120)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/gzip"
    return resp.content


def _import(base: str, data: bytes, index: str = "kb") -> httpx.Response:
    return httpx.post(f"{base}/indexes/{index}/import", content=data, headers={"Content-Type": "application/gzip"},
                      timeout=300)


def _lines(data: bytes) -> tuple[dict, dict[str, dict]]:
    lines = [json.loads(x) for x in gzip.decompress(data).splitlines()]
    return lines[0], {d["id"]: d for d in lines[1:-1]}


def _results(base: str, index: str = "kb") -> list[list[tuple[str, float]]]:
    out = []
    for q in QUERIES:
        resp = httpx.post(f"{base}/retrieve", json={"index_name": index, "query": q, "max_node_count": 8}, timeout=60)
        assert resp.status_code == 200, resp.text
        out.append([(r["doc_id"], r["score"]) for r in resp.json()["results"]])
    return out


def _same_results(a: list, b: list) -> None:
    for x, y in zip(a, b, strict=True):
        assert [d for d, _ in x] == [d for d, _ in y]
        assert [s for _, s in x] == pytest.approx([s for _, s in y], abs=1e-5)


def _no_leftovers(app, index: str) -> None:
    """Nothing of a refused import: no index, and no hidden index in the store either."""
    registry = app.state.registry
    assert index not in registry.names()
    import asyncio

    names = registry.inner.names() if not registry.shared else asyncio.run(_names(registry))
    assert [n for n in names if n.split("/")[0] == index] == []


async def _names(registry) -> list[str]:
    return await registry.inner.list_names()


def test_export_then_import_into_each_store_is_identical(vector_store, embedder, tmp_path, request, store_prefix):
    with _engine(embedder, vector_store, tmp_path / "source", request, store_prefix, hybrid=False) as (base, _app):
        assert httpx.post(f"{base}/index", json={"index_name": "kb", "documents": DOCS,
                                                 "chunking": {"chunk_size": 64}}, timeout=300).status_code == 200
        exported = _export(base)
        results = _results(base)
    head, docs = _lines(exported)
    assert head["format"] == "ragengine-index-export" and head["version"] == 1
    assert head["embedding"]["dim"] == 384 and head["chunking"]["chunk_size"] == 64
    assert sorted(docs) == sorted(d["doc_id"] for d in DOCS)
    assert any(len(d["spans"]) > 1 for d in docs.values())
    for target in STORES:
        prefix = f"{store_prefix}_{target[:2]}"
        with _engine(embedder, target, tmp_path / f"to-{target}", request, prefix, hybrid=False) as (base, _app):
            resp = _import(base, exported)
            assert resp.status_code == 201, resp.text
            assert resp.json() | {"source_index": "kb"} == {
                "index": "kb", "documents": 40, "chunks": sum(len(d["spans"]) for d in docs.values()),
                "vectors": "reused", "source_index": "kb", "source_embedding_model": head["embedding"]["key"],
                "embedding_model": head["embedding"]["key"]}
            again_head, again = _lines(_export(base))
            assert again_head["chunking"] == head["chunking"] and again_head["embedding"] == head["embedding"]
            assert again.keys() == docs.keys()
            for doc_id, doc in docs.items():  # texts, metadata, chunks and vectors, bit for bit
                assert again[doc_id] == doc, (target, doc_id)
            _same_results(_results(base), results)
            assert _import(base, exported).status_code == 409  # the name is taken: delete it first


def test_import_with_another_model_embeds_the_texts_again(embedder, tmp_path, request, store_prefix):
    with _engine(embedder, "faiss", tmp_path / "source", request, store_prefix) as (base, _app):
        assert httpx.post(f"{base}/index", json={"index_name": "kb", "documents": DOCS}, timeout=300).status_code == 200
        exported = _export(base)
    with _engine(None, "faiss", tmp_path / "wordllama", request, store_prefix,
                 embedding_model="wordllama:l2_supercat") as (base, _app):
        resp = _import(base, exported, "copy")
        assert resp.status_code == 201, resp.text
        assert resp.json()["vectors"] == "re-embedded" and resp.json()["embedding_model"] == "wordllama:l2_supercat"
        head, docs = _lines(_export(base, "copy"))
        assert head["embedding"]["dim"] == 256 and sorted(docs) == sorted(d["doc_id"] for d in DOCS)
        assert {d: (x["text"], x["meta"]) for d, x in docs.items()} == \
            {d["doc_id"]: (d["text"], d["metadata"]) for d in DOCS}
        hits = httpx.post(f"{base}/retrieve", json={"index_name": "copy", "query": "fog", "max_node_count": 3}).json()
        assert hits["results"] and hits["results"][0]["metadata"]["kind"] == "fog"


def _rewrite(data: bytes, change) -> bytes:
    from ragengine.versions.archive import ArchiveWriter

    lines = [json.loads(x) for x in gzip.decompress(data).splitlines()]
    head = change(lines[0])
    writer = ArchiveWriter()
    out = writer.start(head)
    import base64

    import numpy as np

    docs = [{**d, "vectors": np.frombuffer(base64.b64decode(d["vectors"]), dtype="<f4").reshape(len(d["spans"]), -1)}
            for d in lines[1:-1]]
    return out + writer.documents_batch(docs) + writer.finish()


def test_damaged_files_are_refused_and_leave_nothing(vector_store, embedder, tmp_path, request, store_prefix):
    with _engine(embedder, vector_store, tmp_path / "e", request, store_prefix) as (base, app):
        assert httpx.post(f"{base}/index", json={"index_name": "kb", "documents": DOCS}, timeout=300).status_code == 200
        good = _export(base)
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0x01
        cases = {
            "truncated": (good[: len(good) * 2 // 3], "truncated"),
            "truncated at the trailer": (good[:-4], "truncated"),
            "flipped byte": (bytes(flipped), "damaged"),
            "wrong version": (_rewrite(good, lambda h: {**h, "version": 2}), "format version 2"),
            "not an export": (b"hello, not a gzip file" * 100, "damaged or not a ragengine export"),
        }
        for case, (data, message) in cases.items():
            resp = _import(base, data, "copy")
            assert resp.status_code == 400, (case, resp.status_code, resp.text)
            assert message in resp.json()["detail"], (case, resp.text)
            assert httpx.get(f"{base}/indexes").json() == ["kb"], case
            _no_leftovers(app, "copy")
        assert _import(base, good, "copy").status_code == 201  # the name was never half taken
        assert httpx.get(f"{base}/indexes/copy/documents").json()["total_items"] == len(DOCS)


@pytest.mark.stores("faiss")
def test_cli_export_and_import(make_server, tmp_path):
    from ragengine.cli import main

    with make_server() as (base, _app):
        assert httpx.post(f"{base}/index", json={"index_name": "kb", "documents": DOCS[:10]}).status_code == 200
        assert httpx.post(f"{base}/index", json={"index_name": "notes", "documents": DOCS[10:12]}).status_code == 200
        runner = CliRunner()
        out = runner.invoke(main, ["export", "--url", base, "--index", "kb", "-o", str(tmp_path / "kb.ragx.gz")])
        assert out.exit_code == 0, out.output
        assert "kb: 10 documents" in out.output
        out = runner.invoke(main, ["import", str(tmp_path / "kb.ragx.gz"), "--url", base, "--index", "kb2"])
        assert out.exit_code == 0, out.output
        assert "kb2: 10 documents" in out.output and "vectors reused" in out.output
        assert httpx.get(f"{base}/indexes/kb2/documents").json()["total_items"] == 10
        out = runner.invoke(main, ["import", str(tmp_path / "kb.ragx.gz"), "--url", base])  # the name in the file
        assert out.exit_code != 0 and "409" in out.output
        backups = tmp_path / "backups"
        for _ in range(3):
            out = runner.invoke(main, ["export", "--url", base, "--all", "--dir", str(backups), "--keep", "2"])
            assert out.exit_code == 0, out.output
        names = sorted(p.name for p in backups.iterdir())
        assert len(names) == 6 and not any(n.endswith(".part") for n in names)
        assert sum(n.startswith("kb2-") for n in names) == 2 and sum(n.startswith("notes-") for n in names) == 2
        damaged = tmp_path / "damaged.ragx.gz"
        damaged.write_bytes((tmp_path / "kb.ragx.gz").read_bytes()[:-10])
        out = runner.invoke(main, ["import", str(damaged), "--url", base, "--index", "kb3"])
        assert out.exit_code != 0 and "truncated" in out.output
