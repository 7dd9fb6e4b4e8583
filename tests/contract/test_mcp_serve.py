"""``ragengine serve`` (its own process, as users run it) answers MCP on /mcp: the official client lists the
tools, and ``search`` / ``fetch`` give what ``/retrieve`` and the documents route give, on both protocol eras.
Access control, sessions and bad input are tests/engine/test_mcp.py's (an app on a real uvicorn server)."""

from __future__ import annotations

import json

import httpx
import pytest
from mcp.client import Client

from tests.contract.conftest import SEEDED_DOCS, SEEDED_INDEX

QUESTION = "How are writes made durable?"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_served_engine_answers_mcp_as_its_rest_routes_do(engine, mode):
    expected = httpx.post(f"{engine.base_url}/retrieve", timeout=60, json={
        "index_name": SEEDED_INDEX, "query": QUESTION, "max_node_count": 2, "max_chunks_per_document": 1}).json()
    async with Client(f"{engine.base_url}/mcp", mode=mode) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"search", "fetch", "list_indexes"}
        found = await client.call_tool("search", {"query": QUESTION, "index": SEEDED_INDEX, "top_k": 2})
        results = json.loads(found.content[0].text)["results"]
        assert [(r["doc_id"], r["text"]) for r in results] == [(r["doc_id"], r["text"]) for r in expected["results"]]
        assert results[0]["doc_id"] == "doc-journal"
        fetched = await client.call_tool("fetch", {"id": f"{SEEDED_INDEX}/doc-journal"})
        doc = json.loads(fetched.content[0].text)
        assert (doc["text"], doc["metadata"]) == (SEEDED_DOCS[1]["text"], SEEDED_DOCS[1]["metadata"])
