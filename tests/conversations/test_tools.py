"""Tool-calling retrieval: the model picks the query, the server fixes the scope; nothing widens it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from ragengine.conversations.tools import (
    SEMANTIC_SEARCH_TOOL,
    Scope,
    parse_tool_arguments,
    run_tool_loop,
    scoped_search,
)
from ragengine.index.types import RetrievedNode
from ragengine.retrieval.filters import matches, parse_filters
from tests.conversations.scripted_llm import tool_call

HOSTILE_IDS = ["a' OR file_id != '", "*", "%", "b OR 1=1", "c\" OR \"1\"=\"1", "file_*", ".*"]


@dataclass
class FakeRegistry:
    """Evaluates the structured filter with the engine's own matcher over a fixed corpus."""

    docs: list[dict]
    calls: list[dict] = field(default_factory=list)

    def exists(self, name: str) -> bool:
        return True

    async def retrieve(self, index_name, query, top_k, *, filters=None, metadata_filter=None, query_embedding=None,
                       acl=None):
        self.calls.append({"query": query, "top_k": top_k, "filters": filters})
        flt = parse_filters(filters) if filters is not None else None
        hits = [d for d in self.docs if matches(flt, d["metadata"]) and matches(acl, d["metadata"])]
        return [RetrievedNode(d["doc_id"], d["doc_id"], d["text"], 0.5, d["metadata"]) for d in hits][:top_k]


def corpus(ids):
    return [{"doc_id": f"d-{i}", "text": f"text of {fid}", "metadata": {"file_id": fid}} for i, fid in enumerate(ids)]


@dataclass
class FakeLLM:
    script: list[dict]
    seen: list[dict] = field(default_factory=list)
    configured: bool = True

    async def model_name(self):
        return "m"

    async def chat(self, payload):
        self.seen.append(json.loads(json.dumps(payload)))
        message = self.script.pop(0) if self.script else {"content": "final"}

        class R:
            body: ClassVar = {"choices": [{"message": {"role": "assistant", **message}}]}
            endpoint = "fake"
        return R()


def test_tool_definition_exposes_only_query_and_top_k():
    params = SEMANTIC_SEARCH_TOOL["function"]["parameters"]
    assert set(params["properties"]) == {"query", "top_k"} and params["required"] == ["query"]


@pytest.mark.parametrize("raw, query, top_k, ignored, error", [
    ('{"query": "q", "top_k": 3}', "q", 3, [], None),
    ('{"query": "q", "top_k": 10000}', "q", 20, [], None),
    ('{"query": "q", "top_k": -4}', "q", 1, [], None),
    ('{"query": "q", "top_k": "7"}', "q", 7, [], None),
    ('{"query": "q", "top_k": true}', "q", 5, [], None),
    ('{"query": "q", "file_ids": ["x"], "filters": {"type": "eq"}, "index": "other"}', "q", 5,
     ["file_ids", "filters", "index"], None),
    ('{"query": ""}', "", 0, [], "'query' must be a non-empty string"),
    ('not json', "", 0, [], "arguments are not valid JSON"),
    ('["q"]', "", 0, [], "arguments must be a JSON object"),
])
def test_parse_tool_arguments(raw, query, top_k, ignored, error):
    args = parse_tool_arguments(raw, default_top_k=5, max_top_k=20)
    assert (args.query, args.top_k, args.ignored, args.error) == (query, top_k, ignored, error)


def test_scope_is_a_structured_in_filter_of_values():
    scope = Scope("conversations", tuple(HOSTILE_IDS))
    assert scope.to_filter() == {"type": "in", "key": "file_id", "value": HOSTILE_IDS}
    parse_filters(scope.to_filter())  # valid for the engine's parser, ids untouched
    assert Scope("conversations", ()).to_filter() is None


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
async def test_hostile_ids_match_only_themselves(hostile):
    others = ["a", "b", "c", "file_1", "file_2", "x"]
    registry = FakeRegistry(corpus([hostile, *others]))
    found = await scoped_search(registry, Scope("conversations", (hostile,)), "anything", 50)
    assert [n.metadata["file_id"] for n in found] == [hostile]


async def test_empty_scope_never_searches():
    registry = FakeRegistry(corpus(["a", "b"]))
    assert await scoped_search(registry, Scope("conversations", ()), "q", 5) == []
    assert registry.calls == []


async def test_tool_loop_ignores_widening_arguments_and_bounds_iterations():
    registry = FakeRegistry(corpus(["mine", "theirs", "theirs2"]))
    widen = [tool_call("q1", file_ids=["theirs"]),
             tool_call("q2", filters={"type": "eq", "key": "file_id", "value": "theirs"}),
             tool_call(raw='{"query": "q3", "top_k": 50, "scope": "*"}'),
             tool_call("q4", name="read_file")]
    again = {"content": None, "tool_calls": [tool_call("again")]}
    llm = FakeLLM([{"content": None, "tool_calls": widen}, again, again, {"content": "final"}])
    result = await run_tool_loop(llm, registry, Scope("conversations", ("mine",)), [{"role": "user", "content": "hi"}],
                                 max_iterations=3, default_top_k=5, max_top_k=20)
    assert {n.metadata["file_id"] for n in result.nodes} == {"mine"}
    assert all(c["filters"] == {"type": "in", "key": "file_id", "value": ["mine"]} for c in registry.calls)
    assert result.calls[0]["ignored_arguments"] == ["file_ids"]
    assert result.calls[3]["error"] == "unknown tool 'read_file'"
    # 3 rounds with tools, then one call without tools that must answer
    assert len(llm.seen) == 4 and "tools" not in llm.seen[-1] and all("tools" in p for p in llm.seen[:3])
    assert result.answer == "final" and result.iterations == 3
    # tool results went back as role=tool messages, paired with the assistant's tool_calls
    last = llm.seen[-1]["messages"]
    tool_msgs = [m for m in last if m["role"] == "tool"]
    assert len(tool_msgs) == 4 + 2 and all(m["tool_call_id"] for m in tool_msgs)
    assert any(m["role"] == "assistant" and m.get("tool_calls") for m in last)
    for m in tool_msgs:
        for chunk in json.loads(m["content"]).get("chunks", []):
            assert chunk["file_id"] == "mine"


async def test_tool_loop_model_that_never_stops_gets_no_answer():
    llm = FakeLLM([{"content": None, "tool_calls": [tool_call("again")]}] * 10)
    result = await run_tool_loop(llm, FakeRegistry(corpus(["mine"])), Scope("conversations", ("mine",)),
                                 [{"role": "user", "content": "hi"}], max_iterations=2, default_top_k=5, max_top_k=20)
    assert result.answer == "" and len(llm.seen) == 3 and len(result.nodes) == 1
