"""The KAITO-compatible index API over a real uvicorn server, real FAISS and the real embedding model."""

from __future__ import annotations

import hashlib
import json
import threading
from urllib.parse import unquote

import httpx
import pytest

from ragengine.metrics import REGISTRY

DOCS = [
    {"text": "FAISS searches unit vectors by inner product, which equals cosine similarity.",
     "metadata": {"topic": "vectors", "year": 2023, "tags": ["faiss", "search"]}},
    {"text": "The journal is fsynced before the engine acknowledges a write, so data survives kill -9.",
     "metadata": {"topic": "durability", "year": 2024, "author": "O'Brien \"Bob\""}},
    {"text": "BM25 ranks documents by term frequency and inverse document frequency of keywords.",
     "metadata": {"topic": "keywords", "year": 2025}},
]


def _index(base: str, name: str = "kb", docs=DOCS, **extra) -> httpx.Response:
    return httpx.post(f"{base}/index", json={"index_name": name, "documents": docs, **extra}, timeout=60)


def test_index_list_retrieve_roundtrip(server):
    resp = _index(server)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [d["doc_id"] for d in body] == [hashlib.sha256(d["text"].encode()).hexdigest() for d in DOCS]
    assert body[0]["metadata"]["topic"] == "vectors" and body[0]["is_truncated"] is False
    assert httpx.get(f"{server}/indexes").json() == ["kb"]

    # Same text again: no duplicate.
    assert _index(server).status_code == 200
    listing = httpx.get(f"{server}/indexes/kb/documents").json()
    assert listing["total_items"] == 3 and listing["count"] == 3

    resp = httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "does my data survive a crash?",
                                                   "max_node_count": 2})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["count"] == 2 and out["query"] == "does my data survive a crash?"
    top = out["results"][0]
    assert "journal" in top["text"]
    assert set(top) >= {"doc_id", "node_id", "text", "score", "dense_score", "sparse_score", "metadata"}
    assert 0.0 <= top["score"] <= 1.0 and top["score"] >= out["results"][1]["score"] - 0.2
    # node ids are stable across calls
    again = httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "does my data survive a crash?",
                                                    "max_node_count": 2}).json()
    assert again["results"][0]["node_id"] == top["node_id"]


def test_retrieve_explain_shows_both_legs_ranks_and_the_threshold_on_every_store(server):
    """explain: each result's place in the dense and keyword lists, its fused score, and what they are
    measured against; without it the answer keeps its KAITO shape (no new keys)."""
    assert _index(server).status_code == 200
    ask = {"index_name": "kb", "query": "BM25 keywords term frequency", "max_node_count": 3}
    plain = httpx.post(f"{server}/retrieve", json=ask).json()
    assert "explain" not in plain and all("dense_rank" not in r for r in plain["results"])
    resp = httpx.post(f"{server}/retrieve", json={**ask, "explain": True})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["explain"] == {"hybrid": True, "fusion": "convex", "dense_weight": 0.85, "candidates": 50,
                              "reranked": False, "similarity_threshold": 0.3}
    top = out["results"][0]
    assert "BM25" in top["text"] and top["sparse_rank"] == 1 and top["dense_rank"] == 1
    # the fused scores order the results; ranks are places in each leg (3 documents: every one is a dense candidate)
    fused = [r["fused_score"] for r in out["results"]]
    assert fused == sorted(fused, reverse=True) and all(0 <= f <= 1 for f in fused)
    assert sorted(r["dense_rank"] for r in out["results"]) == [1, 2, 3]
    assert [r["doc_id"] for r in out["results"]] == [r["doc_id"] for r in plain["results"]]
    # a result only one leg found has no rank in the other
    only_dense = httpx.post(f"{server}/retrieve", json={**ask, "query": "zzqx", "explain": True}).json()
    assert all(r["sparse_rank"] is None and r["dense_rank"] is not None for r in only_dense["results"])


def test_client_doc_id_honoured_and_conflict(server):
    docs = [{"doc_id": "my-id", "text": "hello world", "metadata": {"a": 1}}]
    assert _index(server, docs=docs).json()[0]["doc_id"] == "my-id"
    resp = _index(server, docs=[{"doc_id": "my-id", "text": "other text"}])
    assert resp.status_code == 409 and "already exists" in resp.json()["detail"]


def test_list_documents_pagination_and_filter(server):
    _index(server)
    page = httpx.get(f"{server}/indexes/kb/documents", params={"limit": 1, "offset": 1, "max_text_length": 10}).json()
    assert page["count"] == 1 and page["total_items"] == 3
    assert len(page["documents"][0]["text"]) == 10 and page["documents"][0]["is_truncated"] is True
    flt = httpx.get(f"{server}/indexes/kb/documents", params={"metadata_filter": json.dumps({"topic": "keywords"})}).json()
    assert flt["total_items"] == 1 and flt["documents"][0]["metadata"]["topic"] == "keywords"
    bad = httpx.get(f"{server}/indexes/kb/documents", params={"metadata_filter": "{not json"})
    assert bad.status_code == 400
    assert bad.json()["detail"] == "Invalid metadata filter format. Must be a valid JSON string."
    assert httpx.get(f"{server}/indexes/kb/documents", params={"limit": 101}).status_code == 422
    missing = httpx.get(f"{server}/indexes/nope/documents")
    assert missing.status_code == 404 and missing.json()["detail"] == "No such index: 'nope' exists."


def test_list_documents_search_and_doc_id_on_every_store(server):
    """The console's document search: a case-insensitive substring of the id or the text, applied before
    paging (total_items counts matches) and ANDed with the metadata filter; doc_id picks one document.
    LIKE's wildcards mean themselves."""
    docs = [*DOCS, {"doc_id": "Runbook-7", "text": "Restart the pump: 100% of valves_closed first."}]
    assert _index(server, docs=docs).status_code == 200

    def listing(**params) -> dict:
        resp = httpx.get(f"{server}/indexes/kb/documents", params=params)
        assert resp.status_code == 200, resp.text
        return resp.json()

    found = listing(search="fsynceD")
    assert found["total_items"] == 1 and "journal" in found["documents"][0]["text"]
    assert [d["doc_id"] for d in listing(search="runbook")["documents"]] == ["Runbook-7"]  # the id matches
    assert listing(search="100%")["total_items"] == 1 and listing(search="0%o")["total_items"] == 0
    assert listing(search="s_c")["total_items"] == 1 and listing(search="s%c")["total_items"] == 0
    paged = listing(search="e", limit=2, offset=1)  # every document holds an "e"
    assert paged["total_items"] == 4 and paged["count"] == 2
    assert listing(search="the", metadata_filter=json.dumps({"topic": "durability"}))["total_items"] == 1
    assert listing(search="   ")["total_items"] == 4  # blank: no search
    one = listing(doc_id="Runbook-7")
    assert one["total_items"] == 1 and one["documents"][0]["doc_id"] == "Runbook-7"
    assert listing(doc_id="runbook-7")["total_items"] == 0  # exact, unlike search
    assert listing(doc_id="Runbook-7", search="journal")["total_items"] == 0
    too_long = httpx.get(f"{server}/indexes/kb/documents", params={"search": "x" * 1001})
    assert too_long.status_code == 422 and "search" in too_long.text


def test_update_and_delete_documents(server):
    ids = [d["doc_id"] for d in _index(server).json()]
    resp = httpx.post(f"{server}/indexes/kb/documents", json={"documents": [
        {"doc_id": ids[0], "text": DOCS[0]["text"], "metadata": DOCS[0]["metadata"]},  # unchanged
        {"doc_id": ids[1], "text": "Snapshots are renamed into place atomically.", "metadata": {"topic": "durability"}},
        {"doc_id": ids[2], "text": DOCS[2]["text"], "metadata": {"topic": "bm25"}},  # metadata only
        {"doc_id": "ghost", "text": "nobody"},
    ]}, timeout=60)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [d["doc_id"] for d in body["unchanged_documents"]] == [ids[0]]
    assert [d["doc_id"] for d in body["updated_documents"]] == [ids[1], ids[2]]
    assert [d["doc_id"] for d in body["not_found_documents"]] == ["ghost"]
    hits = httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "atomic rename of snapshots",
                                                   "max_node_count": 1}).json()["results"]
    assert hits[0]["doc_id"] == ids[1] and "renamed" in hits[0]["text"]
    hits = httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "keywords",
                                                   "metadata_filter": {"topic": "bm25"}}).json()["results"]
    assert [h["doc_id"] for h in hits] == [ids[2]]

    resp = httpx.post(f"{server}/indexes/kb/documents/delete", json={"doc_ids": [ids[0], "ghost"]})
    assert resp.json() == {"deleted_doc_ids": [ids[0]], "not_found_doc_ids": ["ghost"]}
    hits = httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "cosine similarity inner product",
                                                   "max_node_count": 5}).json()["results"]
    assert ids[0] not in {h["doc_id"] for h in hits} and len(hits) == 2


def _embedded(base: str) -> float:
    import re

    found = re.search(r'^ragengine_embedded_texts_total\{kind="documents"\} (\S+)$', httpx.get(f"{base}/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_metadata_update_keeps_text_and_vectors_and_embeds_nothing(server):
    """POST /indexes/{name}/documents/metadata (the sources' ACL rules): the metadata is replaced whole, the
    text, chunks and vectors stay; a missing id is reported, a body without metadata is a 422."""
    ids = [d["doc_id"] for d in _index(server).json()]
    before = _embedded(server)
    resp = httpx.post(f"{server}/indexes/kb/documents/metadata", json={"documents": [
        {"doc_id": ids[0], "metadata": {"topic": "moved", "acl": ["group:ops"]}}, {"doc_id": "ghost", "metadata": {}}]})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [d["doc_id"] for d in body["updated_documents"]] == [ids[0]]
    assert [d["doc_id"] for d in body["not_found_documents"]] == ["ghost"]
    assert _embedded(server) == before  # nothing embedded
    held = {d["doc_id"]: d for d in httpx.get(f"{server}/indexes/kb/documents",
                                              params={"max_text_length": 1000}).json()["documents"]}
    assert held[ids[0]]["metadata"] == {"topic": "moved", "acl": ["group:ops"]} and held[ids[0]]["text"] == DOCS[0]["text"]
    hits = httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "cosine similarity inner product",
                                                   "metadata_filter": {"topic": "moved"}}).json()["results"]
    assert [h["doc_id"] for h in hits] == [ids[0]]
    refused = httpx.post(f"{server}/indexes/kb/documents/metadata", json={"documents": [{"doc_id": ids[1]}]})
    assert refused.status_code == 422, refused.text
    missing = httpx.post(f"{server}/indexes/nope/documents/metadata", json={"documents": []})
    assert missing.status_code == 404, missing.text


def test_retrieve_filters_restrict_before_top_k(server):
    docs = [{"text": f"note number {i} about gardening and tomatoes",
             "metadata": {"n": i, "kind": "even" if i % 2 == 0 else "odd"}} for i in range(40)]
    assert _index(server, name="notes", docs=docs).status_code == 200
    resp = httpx.post(f"{server}/retrieve", json={
        "index_name": "notes", "query": "tomatoes", "max_node_count": 10,
        "filters": {"type": "and", "filters": [{"type": "eq", "key": "kind", "value": "odd"},
                                               {"type": "or", "filters": [{"type": "lt", "key": "n", "value": 10},
                                                                          {"type": "in", "key": "n", "value": [31, 33]}]}]}})
    assert resp.status_code == 200, resp.text
    got = sorted(r["metadata"]["n"] for r in resp.json()["results"])
    assert got == [1, 3, 5, 7, 9, 31, 33]
    bad = httpx.post(f"{server}/retrieve", json={"index_name": "notes", "query": "x",
                                                  "filters": {"type": "regex", "key": "n", "value": "."}})
    assert bad.status_code == 400 and "unknown type" in bad.json()["detail"]


def test_bad_input(make_server):
    with make_server(max_document_chars=1000, max_body_bytes=64 * 1024, max_top_k=50) as (base, _):
        r = httpx.post(f"{base}/index", content=b'{"index_name": "x", "documents": [',
                       headers={"content-type": "application/json"})
        assert r.status_code == 400 and "Malformed JSON" in r.json()["detail"]
        r = _index(base, docs=[{"text": "   "}])
        assert r.status_code == 400 and "empty" in r.json()["detail"]
        r = _index(base, docs=[{"text": "x" * 1001}])
        assert r.status_code == 413 and "limit is 1000" in r.json()["detail"]
        r = httpx.post(f"{base}/index", json={"index_name": "x", "documents": [{"text": "y" * 100_000}]})
        assert r.status_code == 413 and "too large" in r.json()["detail"]
        r = _index(base, docs=[{"text": "def f(): pass", "metadata": {"split_type": "code"}}])
        assert r.status_code == 400 and "Language not specified" in r.json()["detail"]
        r = _index(base, name="a/b", docs=[{"text": "x"}])
        assert r.status_code == 400 and "not allowed" in r.json()["detail"]
        assert httpx.get(f"{base}/indexes").json() == []  # failed writes create no index
        r = httpx.post(f"{base}/retrieve", json={"index_name": "nope", "query": "q"})
        assert r.status_code == 404 and r.json()["detail"] == "No such index: 'nope' exists."
        _index(base, name="ok", docs=[{"text": "something"}])
        r = httpx.post(f"{base}/retrieve", json={"index_name": "ok", "query": "  "})
        assert r.status_code == 400 and r.json()["detail"] == "Query string cannot be empty."
        r = httpx.post(f"{base}/retrieve", json={"index_name": "ok", "query": "q", "max_node_count": 51})
        assert r.status_code == 422
        r = httpx.post(f"{base}/retrieve", json={"index_name": "ok", "query": "q", "max_node_count": 0})
        assert r.status_code == 422
        r = httpx.post(f"{base}/index", json={"index_name": "ok", "documents": [{"text": 5}]})
        assert r.status_code == 422
        for path in ("../outside", "/etc", "indexes/ok", "a/../../b", "persist/x", ".hidden", "x.tmp", "..", " x"):
            r = httpx.post(f"{base}/persist/ok", params={"path": path})
            assert r.status_code == 400, (path, r.text)
            r = httpx.post(f"{base}/load/ok2", params={"path": path})
            assert r.status_code == 400, (path, r.text)
        r = httpx.delete(f"{base}/indexes/nope")
        assert r.status_code == 404


def test_a_nul_character_is_stored_or_refused_as_bad_input_never_a_5xx(make_server, store_settings):
    """PostgreSQL's text type cannot hold U+0000. Its refusal is the request's fault (a 422 that says so), not
    an unavailable store (it was a 503, and a retrying client would retry forever); the engine stays ready."""
    with make_server() as (base, _):
        r = _index(base, docs=[{"doc_id": "nul", "text": "before\x00after"}])
        if store_settings.get("vector_store") == "postgres":
            assert r.status_code == 422 and "refused the data" in r.json()["detail"], r.text
        else:  # FAISS and Milvus keep the text as it came
            assert r.status_code == 200, r.text
            docs = httpx.get(f"{base}/indexes/kb/documents").json()["documents"]
            assert [d["text"] for d in docs] == ["before\x00after"]
        assert httpx.get(f"{base}/ready").status_code == 200
        assert _index(base, docs=[{"doc_id": "ok", "text": "after a refusal the store still serves"}]).status_code == 200


def test_long_non_ascii_index_name_is_a_400_not_a_500(server):
    """200 characters are allowed, but 'é' x 200 is a 1200-byte folder name (issue 22: it gave a 500)."""
    r = _index(server, name="é" * 200, docs=[{"text": "x"}])
    assert r.status_code == 400 and "URL-quoted" in r.json()["detail"], r.text
    r = _index(server, name="é" * 40, docs=[{"text": "x"}])  # 240 bytes quoted: the most allowed
    assert r.status_code == 200, r.text
    assert httpx.get(f"{server}/indexes").json() == ["é" * 40]


@pytest.mark.stores("faiss")  # the embedded store's own files
def test_persist_load_and_delete_removes_files(server, settings):
    data_dir = settings.data_dir
    _index(server)
    r = httpx.post(f"{server}/persist/kb", params={"path": "kb1"})
    assert r.status_code == 200 and r.json()["message"] == "Successfully persisted index kb to persist/kb1."
    assert (data_dir / "persist/kb1/manifest.json").exists()
    r = httpx.post(f"{server}/persist/kb")  # the default: the index's name
    assert r.status_code == 200 and r.json()["message"] == "Successfully persisted index kb to persist/kb."
    r = httpx.post(f"{server}/persist/kb", params={"path": "kb1"})  # an earlier copy is replaced
    assert r.status_code == 200, r.text
    r = httpx.post(f"{server}/load/kb", params={"path": "kb1"})
    assert r.status_code == 409
    assert r.json()["detail"] == "Index 'kb' already exists. Use a different name or delete the existing index first."
    r = httpx.post(f"{server}/load/kb-copy", params={"path": "kb1"})
    assert r.status_code == 200, r.text
    assert sorted(httpx.get(f"{server}/indexes").json()) == ["kb", "kb-copy"]
    hits = httpx.post(f"{server}/retrieve", json={"index_name": "kb-copy", "query": "keyword ranking"}).json()
    assert hits["count"] == 3
    r = httpx.post(f"{server}/load/kb", params={"path": "kb1", "overwrite": "true"})
    assert r.status_code == 200
    r = httpx.post(f"{server}/load/zz", params={"path": "missing"})
    assert r.status_code == 404 and r.json()["detail"] == "Path does not exist: persist/missing"

    def folders(name: str) -> list[str]:  # a loaded copy is an index version: "<name>/load-<id>" (docs/engine.md)
        return [p.name for p in (data_dir / "indexes").iterdir() if unquote(p.name).split("/")[0] == name]

    assert len(folders("kb-copy")) == 1 and len(folders("kb")) == 1  # the overwritten kb's folder went
    r = httpx.delete(f"{server}/indexes/kb-copy")
    assert r.status_code == 200 and r.json() == {"message": "Successfully deleted index kb-copy."}
    assert folders("kb-copy") == []
    assert httpx.get(f"{server}/indexes").json() == ["kb"]


@pytest.mark.stores("faiss")
def test_persist_cannot_replace_the_engines_own_files(make_server, settings):
    """Issue 22: ``/persist/x?path=sessions.db`` turned the sessions database into a folder and
    ``?path=models`` replaced the model cache, and the engine could not start again."""
    data_dir = settings.data_dir
    cache = data_dir / "models" / "hub" / "model.bin"
    with make_server() as (base, _):
        _index(base, name="x")
        session = httpx.post(f"{base}/v1/sessions", json={"title": "kept"}).json()["id"]
        cache.parent.mkdir(parents=True)
        cache.write_bytes(b"weights")
        for path in ("sessions.db", "models", "uploads", "indexes"):
            r = httpx.post(f"{base}/persist/x", params={"path": path})
            assert r.status_code == 200, r.text
        (data_dir / "persist").mkdir(exist_ok=True)
        (data_dir / "persist" / "notes").mkdir()
        (data_dir / "persist" / "notes" / "todo.txt").write_text("mine")
        (data_dir / "persist" / "file").write_text("mine")
        for path in ("notes", "file"):  # not a snapshot: refused, left as it is
            r = httpx.post(f"{base}/persist/x", params={"path": path})
            assert r.status_code == 409 and "not an index snapshot" in r.json()["detail"], r.text
            r = httpx.post(f"{base}/load/y", params={"path": path})
            assert r.status_code == 400 and "Loading failed" in r.json()["detail"], r.text
    assert (data_dir / "sessions.db").is_file() and cache.read_bytes() == b"weights"
    assert (data_dir / "persist" / "notes" / "todo.txt").read_text() == "mine"
    assert (data_dir / "persist" / "file").read_text() == "mine"
    with make_server() as (base, _):  # the engine starts again, with its sessions and its copies
        assert [s["id"] for s in httpx.get(f"{base}/v1/sessions").json()["data"]] == [session]
        assert httpx.post(f"{base}/load/y", params={"path": "sessions.db"}).status_code == 200
        assert httpx.get(f"{base}/indexes/y/documents").json()["total_items"] == 3


def _embedded_documents() -> float:
    """Texts embedded as documents so far in this process (the in-process servers share the registry)."""
    return REGISTRY.get_sample_value("ragengine_embedded_texts_total", {"kind": "documents"}) or 0.0


def test_restart_restores_indexes_without_reembedding(make_server):
    with make_server() as (base, _):
        _index(base)
        first_id = hashlib.sha256(DOCS[0]["text"].encode()).hexdigest()
        httpx.post(f"{base}/indexes/kb/documents/delete", json={"doc_ids": [first_id]})
    embedded = _embedded_documents()
    with make_server() as (base, _app):
        assert httpx.get(f"{base}/indexes/kb/documents").json()["total_items"] == 2
        hits = httpx.post(f"{base}/retrieve", json={"index_name": "kb", "query": "kill -9"}).json()["results"]
        assert "journal" in hits[0]["text"]
        health = httpx.get(f"{base}/health").json()
        assert health["status"] == "Healthy" and health["indexes"]["kb"]["documents"] == 2
        # the stored vectors were loaded: the restart embedded no document (queries are counted apart)
        assert _embedded_documents() == embedded


@pytest.mark.stores("faiss")  # the embedded store's own files
def test_corrupt_index_reported_not_half_loaded(make_server, settings):
    with make_server() as (base, _):
        _index(base)
        _index(base, name="good", docs=[{"text": "fine"}])
    snap = settings.data_dir / "indexes" / "kb" / "snapshot" / "docs.jsonl"
    data = bytearray(snap.read_bytes())
    data[10] ^= 0xFF
    snap.write_bytes(bytes(data))
    with make_server() as (base, _):
        health = httpx.get(f"{base}/health").json()
        assert health["status"] == "Degraded" and "kb" in health["detail"] and "checksum" in health["detail"]
        assert httpx.get(f"{base}/indexes").json() == ["good"]
        r = httpx.post(f"{base}/retrieve", json={"index_name": "kb", "query": "x"})
        assert r.status_code == 409 and "could not be loaded" in r.json()["detail"]
        assert httpx.delete(f"{base}/indexes/kb").status_code == 200
        assert httpx.get(f"{base}/health").json()["status"] == "Healthy"


def test_health_and_queries_answered_during_big_ingestion(make_server):
    """The event loop is not blocked by an ingestion: probes and queries are answered while it runs.

    Ordering, not timing: the ingestion is held inside its embedding step (the engine's own embedder,
    wrapped) until the probes have been answered, so they are answered during it by construction. How
    fast they are is measured by bench/bench_responsiveness.py.
    """
    with make_server() as (server, app):
        _index(server)
        big = [{"text": " ".join(f"word{j} sentence {i} about ingestion load." for j in range(40))} for i in range(40)]
        embedder = app.state.embedder
        inside, release = threading.Event(), threading.Event()
        original = embedder.embed_texts_sync

        def held(texts):
            inside.set()
            assert release.wait(120), "the test never released the ingestion"
            return original(texts)

        embedder.embed_texts_sync = held
        result = {}
        thread = threading.Thread(target=lambda: result.update(resp=httpx.post(
            f"{server}/index", json={"index_name": "big", "documents": big}, timeout=300)))
        thread.start()
        try:
            assert inside.wait(120), "the ingestion never reached its embedding step"
            health = httpx.get(f"{server}/health", timeout=60)
            query = httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "cosine"}, timeout=60)
            assert health.status_code == 200 and query.status_code == 200, (health.text, query.text)
            assert "FAISS" in query.json()["results"][0]["text"]
            assert "resp" not in result  # still ingesting
        finally:
            release.set()
            thread.join(300)
        assert result["resp"].status_code == 200
        assert httpx.get(f"{server}/indexes/big/documents").json()["total_items"] == len(big)


def test_metrics_exposed(server):
    _index(server)
    httpx.post(f"{server}/retrieve", json={"index_name": "kb", "query": "vectors"})
    httpx.post(f"{server}/retrieve", json={"index_name": "missing", "query": "vectors"})
    text = httpx.get(f"{server}/metrics").text
    assert 'ragengine_http_requests_total{method="POST",path="/retrieve",status="200"}' in text
    assert 'ragengine_http_requests_total{method="POST",path="/retrieve",status="404"}' in text
    assert 'ragengine_index_documents{index="kb"} 3.0' in text
    for name in ("ragengine_embed_seconds", "ragengine_search_seconds", "rag_ttft_seconds", "llm_ttft_seconds"):
        assert name in text


def test_sample_index_loads(make_server):
    with make_server(load_sample_index=True) as (base, _):
        assert "sample" in httpx.get(f"{base}/indexes").json()
        hits = httpx.post(f"{base}/retrieve", json={"index_name": "sample", "query": "what survives kill -9?"}).json()
        assert hits["results"][0]["metadata"]["source"].endswith("durability.md")


@pytest.mark.parametrize("chunking", [{"chunk_size": 32, "chunk_overlap": 4}, {"splitter": "token", "chunk_size": 40}])
def test_per_index_chunking(server, chunking, embedder):
    text = " ".join(f"Sentence {i} talks about topic {i % 7} in some detail." for i in range(80))
    r = _index(server, name="chunky", docs=[{"text": text}], chunking=chunking)
    assert r.status_code == 200, r.text
    hits = httpx.post(f"{server}/retrieve", json={"index_name": "chunky", "query": "topic 3", "max_node_count": 50}).json()
    assert hits["count"] > 5
    assert all(embedder.count_tokens(h["text"]) <= chunking["chunk_size"] for h in hits["results"])
