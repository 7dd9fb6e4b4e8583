"""``POST /v1/responses`` with ``file_search`` through the official openai SDK, on FAISS, PostgreSQL and
Milvus: citations that name the file the answer used, streaming in OpenAI's event order, stored and
stateless responses, follow-ups with ``previous_response_id``."""

from __future__ import annotations

import re

import openai
import pytest

from tests.openai_api.conftest import KAITO, SOUP, new_store

QUESTION = "What is KAITO?"
ANSWER = "KAITO is a Kubernetes operator that automates AI model deployment"


def number_of(body: dict, filename: str) -> int:
    """The number the prompt gave ``filename`` among its sources ("[n] filename")."""
    system = body["messages"][0]["content"]
    return int(re.search(rf"^\[(\d+)\] {re.escape(filename)}$", system, re.M).group(1))


def cites_kaito(body: dict) -> str:
    """The fake model's answer: one sentence from kaito.md, cited with the number the prompt gave it."""
    return f"{ANSWER} [{number_of(body, 'kaito.md')}]. Ask me more."


def tool(store_id: str, **extra) -> list[dict]:
    # score_threshold 0: both files reach the prompt, so the citation has to pick the one the answer used
    return [{"type": "file_search", "vector_store_ids": [store_id], "ranking_options": {"score_threshold": 0.0},
             **extra}]


@pytest.fixture
def store(engine):
    c = engine.client()
    store, ids = new_store(c, (KAITO, {"team": "platform"}), (SOUP, {"team": "facilities"}))
    return store.id, ids


def test_answer_cites_the_file_it_used(engine, store):
    store_id, ids = store
    c = engine.client()
    engine.llm.reply = cites_kaito
    r = c.responses.create(model="gpt-4o-mini", input=QUESTION, tools=tool(store_id))
    sent = engine.llm.last_chat()
    assert "soup.txt" in sent["messages"][0]["content"] and "kaito.md" in sent["messages"][0]["content"]
    assert sent["model"] == "fake-llm"  # an OpenAI model name is answered by the served model
    assert (r.status, r.model, r.object) == ("completed", "fake-llm", "response")
    search, message = r.output
    assert (search.type, search.status, search.queries, search.results) == ("file_search_call", "completed",
                                                                             [QUESTION], None)
    text = message.content[0].text
    assert r.output_text == text and "[" not in text and text.startswith(ANSWER)
    [citation] = message.content[0].annotations
    assert (citation.type, citation.file_id, citation.filename) == ("file_citation", ids["kaito.md"], "kaito.md")
    assert text[:citation.index].rstrip().endswith("deployment")
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0


def test_citations_without_markers_point_to_the_supporting_file(engine, store):
    store_id, ids = store
    c = engine.client()
    engine.llm.reply = "KAITO provisions GPU nodes with Karpenter. It runs vLLM on them."
    r = c.responses.create(model="gpt-4o-mini", input="How does KAITO get GPUs?", tools=tool(store_id))
    annotations = r.output[1].content[0].annotations
    assert {a.file_id for a in annotations} == {ids["kaito.md"]}
    assert r.output_text[:annotations[0].index].endswith("Karpenter .")


def test_include_returns_the_search_hits(engine, store):
    store_id, ids = store
    c = engine.client()
    r = c.responses.create(model="m", input=QUESTION, tools=tool(store_id, max_num_results=2),
                           include=["file_search_call.results"])
    results = r.output[0].results
    assert results[0].filename == "kaito.md" and {x.file_id for x in results} == set(ids.values())
    assert results[0].score >= results[1].score and "Kubernetes" in results[0].text
    assert results[0].attributes == {"team": "platform"}
    filtered = c.responses.create(model="m", input=QUESTION, include=["file_search_call.results"],
                                  tools=tool(store_id, filters={"type": "eq", "key": "team", "value": "facilities"}))
    assert [x.filename for x in filtered.output[0].results] == ["soup.txt"]


def test_streaming_follows_openais_event_order(engine, store):
    store_id, ids = store
    c = engine.client()
    engine.llm.reply = cites_kaito
    with c.responses.stream(model="gpt-4o-mini", input=QUESTION, tools=tool(store_id)) as stream:
        events = list(stream)
        final = stream.get_final_response()  # the SDK's own accumulator checks the order and identities
    kinds = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    collapsed = [k for i, k in enumerate(kinds) if not (k == "response.output_text.delta" and kinds[i - 1] == k)]
    assert collapsed == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.file_search_call.in_progress", "response.file_search_call.searching",
        "response.file_search_call.completed", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.annotation.added", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len(deltas) > 3 and "".join(d.delta for d in deltas) == final.output_text
    assert "[" not in final.output_text and final.output_text.startswith(ANSWER)
    [citation] = final.output[1].content[0].annotations
    assert citation.file_id == ids["kaito.md"]
    assert c.responses.retrieve(final.id).output_text == final.output_text  # stored once complete


def test_follow_up_with_previous_response_id_stored_and_stateless(engine, store):
    store_id, _ = store
    c = engine.client()
    engine.llm.reply = cites_kaito
    first = c.responses.create(model="m", input=QUESTION, instructions="Be brief.", tools=tool(store_id))
    engine.llm.reply = "Microsoft and the community maintain it."
    second = c.responses.create(model="m", input="Who maintains it?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    sent = [(m["role"], m["content"]) for m in engine.llm.last_chat()["messages"]]
    assert sent == [("user", QUESTION), ("assistant", first.output_text), ("user", "Who maintains it?")]
    items = list(c.responses.input_items.list(second.id))
    assert [(i.role, i.content[0].text) for i in items] == [("user", "Who maintains it?")]

    # streamed follow-up of a follow-up: the whole chain is replayed
    with c.responses.stream(model="m", input="Thanks!", previous_response_id=second.id) as stream:
        third = stream.get_final_response()
    sent = [m["role"] for m in engine.llm.last_chat()["messages"]]
    assert sent == ["user", "assistant", "user", "assistant", "user"] and third.previous_response_id == second.id

    stateless = c.responses.create(model="m", input=QUESTION, store=False, tools=tool(store_id))
    assert stateless.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(stateless.id)
    with pytest.raises(openai.NotFoundError) as missing:
        c.responses.create(model="m", input="and then?", previous_response_id=stateless.id)
    assert missing.value.body["param"] == "previous_response_id"
    assert c.responses.delete(first.id) is None  # the SDK returns nothing for a delete
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(first.id)


def test_llm_failure_answers_extractively_with_citations(engine, store):
    store_id, ids = store
    c = engine.client()
    engine.llm.fail_next.append((500, "the GPU fell over"))
    # the engine's similarity threshold (0.3) keeps soup.txt out of the context; the answer cites what it used
    r = c.responses.create(model="m", input=QUESTION, tools=[{"type": "file_search", "vector_store_ids": [store_id]}])
    assert r.model_extra["generation_method"] == "extractive_fallback"
    assert "the GPU fell over" in r.model_extra["fallback_reason"]
    assert "Kubernetes operator" in r.output_text
    assert {a.file_id for a in r.output[1].content[0].annotations} == {ids["kaito.md"]}


def test_mid_stream_failure_is_a_failed_event(engine, store):
    store_id, _ = store
    c = engine.client()
    engine.llm.stream_error_after = 2
    events = list(c.responses.create(model="m", input=QUESTION, tools=tool(store_id), stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "failed" and "crashed" in events[-1].response.error.message


def test_plain_response_without_tools(engine):
    c = engine.client()
    r = c.responses.create(model="m", input=[{"role": "user", "content": "Say hi"}], instructions="You are terse.")
    assert r.output_text == "Echo : Say hi" and [o.type for o in r.output] == ["message"]
    assert engine.llm.last_chat()["messages"][0] == {"role": "system", "content": "You are terse."}
