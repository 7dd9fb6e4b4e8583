"""Errors as the SDK's typed exceptions: a missing store, a bad filter, a file that failed ingestion, and
the rest of what an app can get wrong; on FAISS, PostgreSQL and Milvus."""

from __future__ import annotations

import io

import openai
import pytest

from tests.openai_api.conftest import KAITO, new_store


def test_missing_store_is_not_found_everywhere(engine):
    c = engine.client()
    calls = [
        lambda: c.vector_stores.retrieve("vs_missing"),
        lambda: c.vector_stores.search("vs_missing", query="x"),
        lambda: c.vector_stores.files.list(vector_store_id="vs_missing"),
        lambda: c.vector_stores.delete("vs_missing"),
        lambda: c.responses.create(model="m", input="x",
                                   tools=[{"type": "file_search", "vector_store_ids": ["vs_missing"]}]),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as info:
            call()
        assert info.value.status_code == 404 and "vs_missing" in info.value.message
    store, _ = new_store(c, (KAITO, {}))
    with pytest.raises(openai.NotFoundError) as info:
        c.vector_stores.files.retrieve("file_missing", vector_store_id=store.id)
    assert info.value.body["param"] == "file_id"
    with pytest.raises(openai.NotFoundError) as info:
        c.vector_stores.files.create(vector_store_id=store.id, file_id="file_missing")
    assert info.value.body["param"] == "file_id"


@pytest.mark.parametrize("bad, says", [
    ({"type": "like", "key": "team", "value": "a"}, "unknown type 'like'"),
    ({"type": "eq", "value": "a"}, "needs a non-empty string 'key'"),
    ({"type": "in", "key": "team", "value": "a"}, "needs a list"),
    ({"type": "and", "filters": []}, "non-empty 'filters' list"),
    ({"type": "gt", "key": "year", "value": True}, "number or string"),
])
def test_bad_filter_is_a_bad_request(engine, bad, says):
    c = engine.client()
    store = c.vector_stores.create(name="filters")
    with pytest.raises(openai.BadRequestError) as info:
        c.vector_stores.search(store.id, query="x", filters=bad)
    assert says in info.value.message and info.value.body["param"] == "filters"
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model="m", input="x", tools=[{"type": "file_search", "vector_store_ids": [store.id],
                                                          "filters": bad}])
    assert says in info.value.message


def test_file_that_failed_ingestion(engine):
    c = engine.client()
    store = c.vector_stores.create(name="failures")
    broken = c.files.create(file=("broken.pdf", io.BytesIO(b"%PDF-1.4\n1 0 obj << /Type /Catalog")), purpose="assistants")
    assert (broken.status, broken.model_extra["ingestion_status"]) == ("error", "failed")
    assert "PDF" in broken.status_details
    with pytest.raises(openai.BadRequestError) as info:  # as OpenAI refuses a file it cannot parse
        c.vector_stores.files.upload_and_poll(vector_store_id=store.id,
                                              file=("broken.pdf", io.BytesIO(b"%PDF-1.4\n1 0 obj << /Type")))
    assert info.value.code == "invalid_file" and info.value.body["param"] == "file_id"
    assert "PDF" in info.value.message
    with pytest.raises(openai.BadRequestError):
        c.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[broken.id])
    # a file whose own ingestion into the store fails: the vector store file ends failed, with last_error
    code = c.vector_stores.files.upload_and_poll(vector_store_id=store.id, file=("snippet.txt", io.BytesIO(b"x = 1")),
                                                 attributes={"split_type": "code"}, poll_interval_ms=50)
    assert code.status == "failed" and code.last_error.code == "invalid_file"
    assert "language" in code.last_error.message.lower()
    assert c.vector_stores.retrieve(store.id).file_counts.failed == 1


def test_bad_requests_are_bad_requests(engine):
    c = engine.client()
    store = c.vector_stores.create(name="bad")
    cases = [
        lambda: c.vector_stores.search(store.id, query="x", max_num_results=51),
        lambda: c.vector_stores.search(store.id, query=""),
        lambda: c.vector_stores.files.create(vector_store_id=store.id, file_id="f", chunking_strategy={
            "type": "static", "static": {"max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0}}),
        lambda: c.vector_stores.files.create(vector_store_id=store.id, file_id="f", chunking_strategy={
            "type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 150}}),
        lambda: c.vector_stores.files.create(vector_store_id=store.id, file_id="f", attributes={"k" * 65: "v"}),
        lambda: c.vector_stores.files.create(vector_store_id=store.id, file_id="f", attributes={"acl": "group:ops"}),
        lambda: c.vector_stores.create(metadata={f"k{i}": "v" for i in range(17)}),
        lambda: c.vector_stores.list(order="sideways"),  # type: ignore[arg-type]
        lambda: c.vector_stores.list(after="vs_not_listed"),
        lambda: c.files.list(after="file_not_listed"),
        lambda: c.files.create(file=("a.txt", io.BytesIO(b"hello")), purpose="shopping"),  # type: ignore[arg-type]
        lambda: c.responses.create(model="m", input="x", tools=[{"type": "web_search"}]),
        lambda: c.responses.create(model="m", input=[{"type": "function_call_output", "call_id": "c", "output": "o"}]),
        lambda: c.responses.create(model="m", input="x", tool_choice="required"),
        lambda: c.responses.create(model="m", input="x", background=True),
        lambda: c.responses.create(model="m", input=""),
        lambda: c.responses.create(model="m", input="x", conversation="conv_1"),
        lambda: c.responses.create(model="m", input="x", text={"format": {"type": "json_object"}}),
    ]
    for i, call in enumerate(cases):
        with pytest.raises(openai.BadRequestError):
            call()
            pytest.fail(f"case {i} was accepted")


def test_unsupported_upload_and_auth_errors(engine):
    c = engine.client()
    with pytest.raises(openai.APIStatusError) as info:
        c.files.create(file=("a.gif", io.BytesIO(b"GIF89a" + bytes(20))), purpose="assistants")  # PNG is read (OCR)
    assert info.value.status_code == 415
    wrong = openai.OpenAI(base_url=f"{engine.base}/v1", api_key="not-the-key-0123456789", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.vector_stores.list()
