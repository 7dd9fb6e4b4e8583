"""Vector stores through the official openai SDK against a real engine, on FAISS, PostgreSQL and Milvus:
create, upload and poll, search with OpenAI's filters, files and batches, and existing indexes as stores."""

from __future__ import annotations

import io

import httpx
import openai
import pytest

from tests.openai_api.conftest import API_KEY, FAISS, KAITO, SOUP, new_store, upload


def test_create_upload_and_search_with_filters(engine):
    c = engine.client()
    store, ids = new_store(c, (KAITO, {"team": "platform", "year": 2024, "public": True}),
                           (SOUP, {"team": "facilities", "year": 2021, "public": False}),
                           (FAISS, {"team": "platform", "year": 2019, "public": True}))
    got = c.vector_stores.retrieve(store.id)
    assert (got.status, got.file_counts.completed, got.file_counts.total) == ("completed", 3, 3)
    assert got.usage_bytes > 0 and got.name == store.name and got.object == "vector_store"

    top = c.vector_stores.search(store.id, query="What is KAITO?", max_num_results=1)
    assert [(r.file_id, r.filename) for r in top.data] == [(ids["kaito.md"], "kaito.md")]
    assert top.data[0].attributes == {"team": "platform", "year": 2024, "public": True}
    assert "Kubernetes operator" in top.data[0].content[0].text and 0 < top.data[0].score <= 1

    def found(**kwargs) -> set[str]:
        return {r.filename for r in c.vector_stores.search(store.id, query="what does the document say?", **kwargs)}

    assert found(filters={"type": "eq", "key": "team", "value": "platform"}) == {"kaito.md", "faiss.txt"}
    assert found(filters={"type": "ne", "key": "team", "value": "platform"}) == {"soup.txt"}
    assert found(filters={"type": "gte", "key": "year", "value": 2021}) == {"kaito.md", "soup.txt"}
    assert found(filters={"type": "lt", "key": "year", "value": 2021}) == {"faiss.txt"}
    assert found(filters={"type": "in", "key": "team", "value": ["facilities", "legal"]}) == {"soup.txt"}
    assert found(filters={"type": "nin", "key": "year", "value": [2019, 2021]}) == {"kaito.md"}
    assert found(filters={"type": "eq", "key": "public", "value": False}) == {"soup.txt"}
    both = {"type": "and", "filters": [{"type": "eq", "key": "team", "value": "platform"},
                                       {"type": "gt", "key": "year", "value": 2020}]}
    assert found(filters=both) == {"kaito.md"}
    either = {"type": "or", "filters": [{"type": "eq", "key": "year", "value": 2019},
                                        {"type": "eq", "key": "team", "value": "facilities"}]}
    assert found(filters=either) == {"faiss.txt", "soup.txt"}

    # ranking_options.score_threshold drops weak hits; a list of queries merges their results
    strict = c.vector_stores.search(store.id, query="What is KAITO?", ranking_options={"score_threshold": 0.5})
    assert {r.filename for r in strict} == {"kaito.md"}
    assert all(r.score >= 0.5 for r in strict)
    several = c.vector_stores.search(store.id, query=["KAITO operator", "lentil soup"], max_num_results=2)
    assert {r.filename for r in several} == {"kaito.md", "soup.txt"}


def test_rewrite_query_uses_the_llm_and_reports_the_query_searched(engine):
    c = engine.client()
    store, _ = new_store(c, (KAITO, {}), (SOUP, {}))
    engine.llm.reply = "cafeteria soup days"
    page = c.vector_stores.search(store.id, query="hey, on which days can I get soup in the canteen?",
                                  rewrite_query=True, max_num_results=1)
    assert page.search_query == ["cafeteria soup days"]
    assert page.data[0].filename == "soup.txt"
    asked = engine.llm.last_chat()["messages"]
    assert asked[-1]["content"] == "hey, on which days can I get soup in the canteen?"
    engine.llm.reply = ""  # not a usable query: the question is searched as sent
    kept = c.vector_stores.search(store.id, query="soup days", rewrite_query=True)
    assert kept.search_query == ["soup days"]


def test_files_of_a_store_statuses_attributes_chunking_and_detach(engine):
    c = engine.client()
    store, ids = new_store(c, (KAITO, {"team": "platform"}))
    static = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 20}}
    long_text = " ".join(f"Sentence number {i} talks about pumps and valves in the plant." for i in range(60))
    small = c.vector_stores.files.upload_and_poll(vector_store_id=store.id, file=("plant.txt", io.BytesIO(long_text.encode())),
                                                  chunking_strategy=static, poll_interval_ms=50, max_wait_seconds=120)
    assert small.status == "completed" and small.last_error is None
    assert small.chunking_strategy.type == "static"
    static_used = small.chunking_strategy.static
    assert (static_used.max_chunk_size_tokens, static_used.chunk_overlap_tokens) == (100, 20)
    auto = c.vector_stores.files.retrieve(ids["kaito.md"], vector_store_id=store.id)
    assert auto.chunking_strategy.type == "static" and auto.chunking_strategy.static.max_chunk_size_tokens > 100
    chunks = list(c.vector_stores.files.content(small.id, vector_store_id=store.id))
    assert len(chunks) > 5 and all(ch.type == "text" for ch in chunks)  # 100-token chunks of a ~900-token text

    listed = c.vector_stores.files.list(vector_store_id=store.id, order="asc")
    assert [f.id for f in listed] == [ids["kaito.md"], small.id]
    assert [f.id for f in c.vector_stores.files.list(vector_store_id=store.id, filter="failed")] == []

    updated = c.vector_stores.files.update(ids["kaito.md"], vector_store_id=store.id, attributes={"team": "ml"})
    assert updated.attributes == {"team": "ml"}
    hits = c.vector_stores.search(store.id, query="KAITO", filters={"type": "eq", "key": "team", "value": "ml"})
    assert {r.filename for r in hits} == {"kaito.md"}

    gone = c.vector_stores.files.delete(small.id, vector_store_id=store.id)
    assert gone.deleted and gone.object == "vector_store.file.deleted"
    assert {r.filename for r in c.vector_stores.search(store.id, query="pumps and valves")} == {"kaito.md"}
    assert c.files.retrieve(small.id).id == small.id  # detaching keeps the file
    c.files.delete(ids["kaito.md"])  # deleting the file takes it out of every store (as on OpenAI)
    assert list(c.vector_stores.search(store.id, query="KAITO")) == []
    assert c.vector_stores.retrieve(store.id).file_counts.total == 0


def test_file_batches_create_poll_and_list(engine):
    c = engine.client()
    store = c.vector_stores.create(name="batch")
    files = [c.files.create(file=(name, io.BytesIO(text.encode())), purpose="assistants") for name, text in (KAITO, SOUP)]
    batch = c.vector_stores.file_batches.create_and_poll(vector_store_id=store.id, file_ids=[f.id for f in files],
                                                         attributes={"batch": "one"}, poll_interval_ms=50)
    assert (batch.status, batch.file_counts.completed, batch.file_counts.total) == ("completed", 2, 2)
    assert batch.object == "vector_store.files_batch"
    in_batch = c.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id)
    assert {f.id for f in in_batch} == {f.id for f in files}
    assert {f.attributes["batch"] for f in in_batch} == {"one"}
    assert c.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store.id).status == "completed"
    per_file = c.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, files=[{"file_id": files[0].id, "attributes": {"batch": "two"}}], poll_interval_ms=50)
    assert per_file.file_counts.completed == 1
    assert c.vector_stores.files.retrieve(files[0].id, vector_store_id=store.id).attributes == {"batch": "two"}


def test_cancelling_a_batch_leaves_nothing_in_progress(engine):
    """Whatever the workers finished before the cancel stays completed; the rest is cancelled at once (which
    files get cancelled depends on timing; test_catalog.py checks it with the workers held)."""
    c = engine.client()
    store = c.vector_stores.create(name="cancel")
    files = [c.files.create(file=(f"n{i}.txt", io.BytesIO(f"Note {i} about turbines.".encode())), purpose="assistants")
             for i in range(6)]
    batch = c.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[f.id for f in files])
    cancelled = c.vector_stores.file_batches.cancel(batch.id, vector_store_id=store.id)
    assert cancelled.status == "cancelled" and cancelled.file_counts.in_progress == 0
    assert cancelled.file_counts.cancelled + cancelled.file_counts.completed == 6
    statuses = {f.status for f in c.vector_stores.files.list(vector_store_id=store.id)}
    assert statuses <= {"cancelled", "completed"}


def test_existing_indexes_appear_as_vector_stores(engine):
    c = engine.client()
    name = f"kaito-docs-{engine.store}-{id(c)}"
    r = httpx.post(f"{engine.base}/index", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120,
                   json={"index_name": name, "documents": [
                       {"doc_id": "kaito-1", "text": KAITO[1], "metadata": {"title": "KAITO overview", "lang": "en"}},
                       {"doc_id": "soup-1", "text": SOUP[1], "metadata": {"lang": "de"}}]})
    assert r.status_code == 200, r.text
    assert name in {s.id for s in c.vector_stores.list(limit=100)}
    store = c.vector_stores.retrieve(name)
    assert (store.id, store.name, store.status) == (name, name, "completed")
    hits = c.vector_stores.search(name, query="What is KAITO?", filters={"type": "eq", "key": "lang", "value": "en"})
    assert [(h.file_id, h.filename, h.attributes) for h in hits] == [("kaito-1", "KAITO overview",
                                                                      {"title": "KAITO overview", "lang": "en"})]
    # a store made here is an index the KAITO routes see
    made = c.vector_stores.create(name="made here")
    upload(c, made.id, FAISS)
    listed = httpx.get(f"{engine.base}/indexes/{made.id}/documents", headers={"Authorization": f"Bearer {API_KEY}"})
    assert listed.status_code == 200 and listed.json()["documents"][0]["metadata"]["filename"] == "faiss.txt"


def test_store_pagination_update_and_delete(engine):
    c = engine.client()
    made = [c.vector_stores.create(name=f"page {i}", metadata={"i": str(i)}) for i in range(3)]
    ids = [s.id for s in made]
    newest_first = [s.id for s in c.vector_stores.list(limit=100) if s.id in ids]
    assert newest_first == ids[::-1]
    page = c.vector_stores.list(limit=1, after=ids[2])
    assert [s.id for s in page.data] == [ids[1]] and page.has_more
    before = c.vector_stores.list(limit=1, before=ids[2], order="asc")
    assert [s.id for s in before.data] == [ids[1]] and before.has_more
    every = [s.id for s in c.vector_stores.list(limit=1)]  # the SDK follows has_more / after to the end
    assert set(ids) <= set(every) and len(every) == len(set(every))

    renamed = c.vector_stores.update(ids[0], name="renamed", metadata={"k": "v"},
                                     expires_after={"anchor": "last_active_at", "days": 7})
    assert (renamed.name, renamed.metadata, renamed.expires_after.days) == ("renamed", {"k": "v"}, 7)
    assert renamed.expires_at == renamed.last_active_at + 7 * 86400
    deleted = c.vector_stores.delete(ids[0])
    assert deleted.deleted and deleted.object == "vector_store.deleted"
    with pytest.raises(openai.NotFoundError):
        c.vector_stores.retrieve(ids[0])
