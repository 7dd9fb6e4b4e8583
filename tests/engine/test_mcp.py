"""/mcp with the official MCP Python client over HTTP, against the engine's app on a real uvicorn server.

One engine with an access file: two teams' indexes, a document ACL, a rate-limited key. The client is the
SDK's own ``Client`` over ``streamable_http_client`` (an ``httpx2`` client carrying the key), on the
2026-07-28 revision (no session) and, where sessions matter, the handshake era (``mode="legacy"``).
Raw HTTP only where the client cannot go: malformed JSON-RPC, a session resumed on a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

ADMIN = "admin-key-0123456789abcdef"
OPS_A, DEV_A, READ_B, LIMITED = ("ops-a-0123456789abcdef", "dev-a-0123456789abcdef", "read-b-0123456789abcdef",
                                 "limited-0123456789abcdef")
ACCESS = {"keys": [
    {"name": "ops-a", "key": OPS_A, "indexes": ["team-a-*"], "role": "read", "groups": ["ops"]},
    {"name": "dev-a", "key": DEV_A, "indexes": ["team-a-*"], "role": "read", "groups": ["dev"]},
    {"name": "reader-b", "key": READ_B, "indexes": ["team-b-*"], "role": "read"},
    {"name": "limited", "key": LIMITED, "indexes": ["team-a-*"], "role": "read", "limits": {"requestsPerMinute": 3}},
]}
KB, NOTES = "team-a-kb", "team-b-notes"
DOCS = [
    {"doc_id": "pump-ops", "text": "Ops: restart the pump with valve V-7 closed, then open it slowly.",
     "metadata": {"acl": ["group:ops"], "title": "Pump restart (ops)"}},
    {"doc_id": "pump-dev", "text": "Dev: the pump simulator restarts with make sim-restart.",
     "metadata": {"acl": ["group:dev"], "title": "Pump simulator"}},
    {"doc_id": "pump-all", "text": "Everyone: the pump panel is in hall 2, next to the stairs.",
     "metadata": {"title": "Pump panel", "url": "https://wiki.example/pump-panel"}},
    {"doc_id": "manual", "text": "[page 1]\n" + "The manual covers the installation of the unit. " * 30 + "\n\n[page 2]\n"
     + "The pump's fuse is F3, behind the grey cover of the control box. " * 12, "metadata": {"file_name": "pump-manual.pdf"}},
]
HIDDEN_INDEX = "No such index: '{}' exists."
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def engine(embedder, tmp_path_factory):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import serve_engine

    work = tmp_path_factory.mktemp("mcp")
    (work / "access.yaml").write_text(json.dumps(ACCESS))
    app = create_app(EngineSettings(api_key=ADMIN, access_file=work / "access.yaml", data_dir=work / "data",
                                    mcp_descriptions={KB: "Team A's runbooks: pumps, valves and the plant floor."}))
    with serve_engine(app, embedder) as base:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        for index, docs in ((KB, DOCS), (NOTES, [{"doc_id": "notes", "text": "Team B notes: the pump order."}])):
            resp = httpx.post(f"{base}/index", headers=admin, timeout=120, json={"index_name": index, "documents": docs})
            assert resp.status_code == 200, resp.text
        yield base


@contextlib.asynccontextmanager
async def connect(base: str, key: str, mode: str = "auto", **transport) -> AsyncIterator[Client]:
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http,
                Client(streamable_http_client(f"{base}/mcp", http_client=http, **transport), mode=mode) as client):
        yield client


def payload(result) -> dict:
    assert not result.is_error, result.content
    assert len(result.content) == 1 and result.content[0].type == "text"  # what OpenAI's clients read
    data = json.loads(result.content[0].text)
    assert data == result.structured_content
    return data


def error_text(result) -> str:
    assert result.is_error, result.content
    return result.content[0].text


async def search_ids(client: Client, **args) -> list[str]:
    return [r["id"] for r in payload(await client.call_tool("search", {"query": "how do I restart the pump?",
                                                                        **args}))["results"]]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_lists_the_tools_describing_only_the_indexes_the_caller_sees(engine, mode):
    async with connect(engine, OPS_A, mode) as client:
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else LEGACY)
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"search", "fetch", "list_indexes"}
        search = tools["search"]
        assert KB in search.description and "pumps, valves" in search.description and NOTES not in search.description
        assert search.input_schema["required"] == ["query"]
        assert search.input_schema["properties"]["index"]["anyOf"][0]["enum"] == [KB]
        assert all(t.annotations.read_only_hint for t in tools.values())
        assert payload(await client.call_tool("list_indexes", {})) == {
            "indexes": [{"name": KB, "description": "Team A's runbooks: pumps, valves and the plant floor."}]}
    async with connect(engine, READ_B, mode) as client:
        description = {t.name: t for t in (await client.list_tools()).tools}["search"].description
        assert NOTES in description and KB not in description


async def test_search_and_fetch_return_what_retrieve_and_the_documents_route_give(engine):
    admin = {"Authorization": f"Bearer {ADMIN}"}
    expected = httpx.post(f"{engine}/retrieve", headers=admin, timeout=60, json={
        "index_name": KB, "query": "how do I restart the pump?", "max_node_count": 3, "max_chunks_per_document": 1,
    }).json()["results"]
    async with connect(engine, ADMIN) as client:
        found = payload(await client.call_tool("search", {"query": "how do I restart the pump?", "index": KB,
                                                          "top_k": 3}))["results"]
        assert [(r["doc_id"], r["node_id"], r["text"], r["metadata"]) for r in found] == \
            [(r["doc_id"], r["node_id"], r["text"], r["metadata"]) for r in expected]
        assert [r["score"] for r in found] == pytest.approx([r["score"] for r in expected], rel=1e-5)
        assert [r["id"] for r in found] == [f"{KB}/{r['doc_id']}" for r in expected]
        panel = next(r for r in found if r["doc_id"] == "pump-all")
        assert (panel["title"], panel["url"]) == ("Pump panel", "https://wiki.example/pump-panel")
        # the same filters as /retrieve: a metadata filter narrows the results
        narrowed = await search_ids(client, index=KB, metadata_filter={"title": "Pump panel"})
        assert narrowed == [f"{KB}/pump-all"]
        listed = httpx.get(f"{engine}/indexes/{KB}/documents", headers=admin,
                           params={"limit": 10, "max_text_length": 100_000}).json()["documents"]
        for doc in listed:
            fetched = payload(await client.call_tool("fetch", {"id": f"{KB}/{doc['doc_id']}"}))
            assert fetched["text"] == doc["text"] and fetched["metadata"] == doc["metadata"]
            assert fetched["id"] == f"{KB}/{doc['doc_id']}"
        ops = payload(await client.call_tool("fetch", {"id": f"{KB}/pump-ops"}))
        assert (ops["title"], ops["url"]) == ("Pump restart (ops)", f"ragengine://{KB}/pump-ops")


async def test_a_search_result_names_the_place_its_passage_comes_from(engine):
    """Issue 44: citations with places on every surface, MCP's included."""
    async with connect(engine, ADMIN) as client:
        found = payload(await client.call_tool("search", {"query": "which fuse does the pump have?", "index": KB,
                                                          "top_k": 1}))["results"]
    assert found[0]["doc_id"] == "manual" and found[0]["metadata"]["page"] == 2
    assert found[0]["citation"] == "pump-manual.pdf, p. 2"


async def test_a_key_scoped_to_one_index_cannot_reach_another(engine, caplog):
    async with connect(engine, READ_B) as client:
        with caplog.at_level("WARNING", logger="ragengine.access"):
            hidden = error_text(await client.call_tool("search", {"query": "pump", "index": KB}))
        audited = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ragengine.access"]
        assert {"event": "access_denied", "principal": "key:reader-b", "method": "MCP", "route": "tools/call search",
                "index": KB, "reason": "index_not_visible", "status": 404} in audited
        missing = error_text(await client.call_tool("search", {"query": "pump", "index": "team-b-none"}))
        assert hidden == HIDDEN_INDEX.format(KB) and missing == HIDDEN_INDEX.format("team-b-none")
        assert error_text(await client.call_tool("fetch", {"id": f"{KB}/pump-all"})) == HIDDEN_INDEX.format(KB)
        assert error_text(await client.call_tool("fetch", {"id": "team-b-none/x"})) == HIDDEN_INDEX.format("team-b-none")
        assert all(i.startswith(f"{NOTES}/") for i in await search_ids(client, top_k=10))  # no index: only its own
        assert payload(await client.call_tool("list_indexes", {}))["indexes"] == [{"name": NOTES, "description": None}]
        assert [r.uri for r in (await client.list_resources()).resources] == [f"ragengine://{NOTES}/notes"]
        for index in (KB, "team-b-none"):
            with pytest.raises(MCPError) as refused:
                await client.read_resource(f"ragengine://{index}/pump-all")
            assert (refused.value.code, refused.value.message) == (-32002, HIDDEN_INDEX.format(index))


async def test_a_document_with_an_acl_stays_hidden_from_a_non_member(engine):
    async with connect(engine, DEV_A) as dev, connect(engine, OPS_A, "legacy") as ops, connect(engine, ADMIN) as admin:
        everyone = {f"{KB}/pump-all", f"{KB}/manual"}  # the documents without an ACL
        assert set(await search_ids(dev, top_k=10)) == {f"{KB}/pump-dev", *everyone}
        assert set(await search_ids(ops, top_k=10, index=KB)) == {f"{KB}/pump-ops", *everyone}
        assert set(await search_ids(admin, top_k=10, index=KB)) == {f"{KB}/{d['doc_id']}" for d in DOCS}
        # fetch, resources: hidden answers exactly like missing
        hidden = error_text(await dev.call_tool("fetch", {"id": f"{KB}/pump-ops"}))
        missing = error_text(await dev.call_tool("fetch", {"id": f"{KB}/pump-none"}))
        assert (hidden, missing) == (f"No such document: '{KB}/pump-ops'.", f"No such document: '{KB}/pump-none'.")
        assert {r.name for r in (await dev.list_resources()).resources} == {f"{KB}/pump-dev", *everyone}
        with pytest.raises(MCPError) as refused:
            await dev.read_resource(f"ragengine://{KB}/pump-ops")
        assert (refused.value.code, refused.value.message) == (-32002, f"No such document: '{KB}/pump-ops'.")
        text = (await ops.read_resource(f"ragengine://{KB}/pump-ops")).contents[0].text
        assert text == DOCS[0]["text"]


@pytest.mark.parametrize("page", [1, 2, 3])
async def test_resource_pages_follow_next_cursor_across_indexes_through_the_acl(engine, monkeypatch, page):
    """Page by page (PAGE made small: the engine runs in this process), the cursors walk every index the caller
    sees, each document once, in the documents route's order, and the hidden ones never."""
    from ragengine.mcp import resources

    monkeypatch.setattr(resources, "PAGE", page)
    for key, sees in ((ADMIN, [KB, NOTES]), (DEV_A, [KB])):
        expected = []
        for index in sees:
            listed = httpx.get(f"{engine}/indexes/{index}/documents", headers={"Authorization": f"Bearer {key}"},
                               params={"limit": 100}, timeout=60).json()
            expected += [f"{index}/{d['doc_id']}" for d in listed["documents"]]
        async with connect(engine, key) as client:
            walked, cursor, pages = [], None, 0
            while True:
                result = await client.list_resources(cursor=cursor)
                assert len(result.resources) <= page
                walked += [r.name for r in result.resources]
                pages += 1
                if not (cursor := result.next_cursor):
                    break
                assert pages <= len(expected) + len(sees), "the cursors never end"
        assert walked == expected
        assert f"{KB}/pump-ops" not in walked if key == DEV_A else len(walked) == len(DOCS) + 1


async def test_a_session_survives_reconnection_and_belongs_to_its_opener(engine):
    sessions: list[str] = []

    async def seen(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            sessions.append(response.headers["mcp-session-id"])

    # The official client opens a session (handshake era), calls a tool, and goes away without ending it.
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {OPS_A}"}, timeout=120,
                                   event_hooks={"response": [seen]}) as http,
                Client(streamable_http_client(f"{engine}/mcp", http_client=http, terminate_on_close=False),
                       mode="legacy") as client):
        assert await search_ids(client, index=KB)
    session = sessions[0]
    # A new connection (another client, another TCP connection) goes on in the same session.
    headers = {"Authorization": f"Bearer {OPS_A}", "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY,
               "Accept": ACCEPT}
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "fetch", "arguments": {"id": f"{KB}/pump-ops"}}}
    with httpx.Client(timeout=60) as fresh:
        answer = fresh.post(f"{engine}/mcp", headers=headers, json=call)
        assert answer.status_code == 200, answer.text
        message = sse_message(answer)
        assert message["id"] == 7 and not message["result"]["isError"]
        assert json.loads(message["result"]["content"][0]["text"])["text"] == DOCS[0]["text"]
        with fresh.stream("GET", f"{engine}/mcp", headers=headers) as stream:  # the session's server stream
            assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    # Another principal holding the id finds no such session; its opener ends it, and then it is gone.
    stolen = httpx.post(f"{engine}/mcp", json=call, timeout=60, headers={**headers, "Authorization": f"Bearer {DEV_A}"})
    assert stolen.status_code == 404, stolen.text
    assert httpx.delete(f"{engine}/mcp", headers=headers, timeout=60).status_code == 200
    assert httpx.post(f"{engine}/mcp", headers=headers, json=call, timeout=60).status_code == 404


def sse_message(response: httpx.Response) -> dict:
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return json.loads(next(d for d in data if d))


async def test_without_credentials_the_answer_is_401_with_a_bearer_challenge(engine):
    bare = httpx.post(f"{engine}/mcp", json={}, headers={"Accept": ACCEPT}, timeout=60)
    assert bare.status_code == 401 and bare.headers["www-authenticate"] == 'Bearer realm="ragengine"'
    wrong = httpx.post(f"{engine}/mcp", json={}, timeout=60,
                       headers={"Accept": ACCEPT, "Authorization": "Bearer not-a-key-0123456789"})
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"].startswith('Bearer realm="ragengine", error="invalid_token"')
    with pytest.raises(Exception):  # noqa: B017 - the client's transport error, whichever it is
        async with connect(engine, "not-a-key-0123456789") as client:
            await client.list_tools()


async def test_bad_input_is_a_protocol_or_tool_error_never_a_500(engine):
    async with connect(engine, ADMIN) as client:
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("drop_tables", {})
        assert unknown.value.code == -32602 and "drop_tables" in unknown.value.message
        for args, named in (({"query": 5}, "query"), ({"query": "pump", "top_k": "5"}, "top_k"),
                            ({"query": "pump", "top_k": 0}, "top_k"), ({"query": "pump", "index": ["a"]}, "index"),
                            ({"query": "pump", "extra": 1}, "extra"), ({"query": "x" * 9000}, "query"),
                            ({"query": "pump", "filters": {"type": "like", "key": "a", "value": 1}}, "filters"),
                            ({"query": "pump", "top_k": 10_000}, "top_k")):
            text = error_text(await client.call_tool("search", args))
            assert named in text, (args, text)
        assert "<index>/<doc_id>" in error_text(await client.call_tool("fetch", {"id": "no-slash"}))
        with pytest.raises(MCPError) as bad_uri:
            await client.read_resource("file:///etc/passwd")
        assert bad_uri.value.code == -32602
        with pytest.raises(MCPError) as bad_cursor:
            await client.list_resources(cursor="not-a-cursor")
        assert bad_cursor.value.code == -32602
    headers = {"Authorization": f"Bearer {ADMIN}", "Accept": ACCEPT, "Content-Type": "application/json"}
    for version in ("2026-07-28", LEGACY):
        versioned = {**headers, "MCP-Protocol-Version": version}
        garbled = httpx.post(f"{engine}/mcp", headers=versioned, content=b'{"jsonrpc": "2.0", "id": 1, "meth', timeout=60)
        assert garbled.status_code == 400 and garbled.json()["error"]["code"] == -32700, garbled.text
        batch = httpx.post(f"{engine}/mcp", headers=versioned, timeout=60,
                           json=[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}])
        assert 400 <= batch.status_code < 500, batch.text
    huge = httpx.post(f"{engine}/mcp", headers=headers, timeout=60, content=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search",
                                                                      "arguments": {"query": "x" * (5 << 20)}}}))
    assert huge.status_code == 413, huge.text[:200]


async def test_rate_limits_count_tool_calls(engine):
    async with connect(engine, LIMITED) as client:
        for _ in range(3):  # the connection's own requests (discovery, listing) are not counted
            await client.list_tools()
            payload(await client.call_tool("list_indexes", {}))
        over = error_text(await client.call_tool("search", {"query": "pump"}))
        assert "3 requests per minute" in over, over
        with pytest.raises(MCPError) as refused:
            await client.read_resource(f"ragengine://{KB}/pump-all")
        assert refused.value.code == -32000 and refused.value.data["retryAfter"] >= 1
    # one counter for the principal, whichever surface it uses
    assert httpx.get(f"{engine}/indexes", headers={"Authorization": f"Bearer {LIMITED}"}).status_code == 429


def test_mcp_is_routed_but_left_out_of_the_openapi_document(engine):
    spec = httpx.get(f"{engine}/openapi.json", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    assert spec.status_code == 200 and "/mcp" not in spec.json()["paths"] and "/retrieve" in spec.json()["paths"]


def test_mcp_enabled_false_serves_no_mcp_route(tmp_path):
    """spec.mcp.enabled: false (RAGENGINE_MCP_ENABLED=false) leaves /mcp out of the app: a 404, not a server."""
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.routes import operations

    on = {path for _, path in operations(create_app(EngineSettings(data_dir=tmp_path)))}
    off = {path for _, path in operations(create_app(EngineSettings(mcp_enabled=False, data_dir=tmp_path)))}
    assert on - off == {p for p in on if p.startswith("/mcp")} != set()


async def test_sessions_are_bounded_and_expire(embedder, tmp_path):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import serve_engine

    app = create_app(EngineSettings(api_key=ADMIN, data_dir=tmp_path / "data", mcp_max_sessions=2,
                                    mcp_session_idle_s=2))
    headers = {"Authorization": f"Bearer {ADMIN}", "Accept": ACCEPT}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    with serve_engine(app, embedder) as base, httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        opened = [http.post("/mcp", json=init) for _ in range(2)]
        assert [r.status_code for r in opened] == [200, 200]
        refused = http.post("/mcp", json=init)
        assert refused.status_code == 503 and "Too many open sessions" in refused.text
        # Sessions with nothing in flight expire (asking to open one touches none of them): room again, and
        # their ids are unknown.
        ids = [r.headers["mcp-session-id"] for r in opened]
        for _ in range(100):
            await asyncio.sleep(0.2)
            again = http.post("/mcp", json=init)
            if again.status_code != 503:
                break
        assert again.status_code == 200, again.text
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        for session in ids:
            expired = http.post("/mcp", json=ping, headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY})
            assert expired.status_code == 404, expired.text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_tool_call_has_a_span_under_its_http_request(embedder, tmp_path, monkeypatch, mode):
    """The engine's tracing (its own provider; spans kept in memory by the OpenTelemetry SDK's exporter here
    instead of sent over OTLP): one span per tool call, a child of the POST /mcp server span that carried it,
    also on a legacy session, whose calls run in the session's own task."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ragengine.access.source import API_KEY_PRINCIPAL
    from ragengine.app import create_app
    from ragengine.observability.tracing import SCOPE, Tracing
    from ragengine.settings import EngineSettings
    from tests.support.embedding import serve_engine

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(Tracing, "from_env", classmethod(lambda cls, *a, **k: cls(provider, provider.get_tracer(SCOPE))))
    app = create_app(EngineSettings(api_key=ADMIN, data_dir=tmp_path / "data"))
    with serve_engine(app, embedder) as base:
        assert httpx.post(f"{base}/index", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120, json={
            "index_name": KB, "documents": DOCS}).status_code == 200
        async with connect(base, ADMIN, mode) as client:
            await search_ids(client, index=KB)
            await search_ids(client, index=KB)
    spans = exporter.get_finished_spans()
    calls = [s for s in spans if s.name == "mcp tools/call search"]
    assert len(calls) == 2
    servers = {s.context.span_id: s for s in spans if s.kind.name == "SERVER"}
    for call in calls:
        assert call.parent is not None and call.parent.span_id in servers, call.name
        assert servers[call.parent.span_id].attributes.get("http.route", "/mcp") == "/mcp"
        assert call.attributes["ragengine.tool"] == "search" and call.attributes["ragengine.outcome"] == "ok"
        assert call.attributes["ragengine.principal"] == f"key:{API_KEY_PRINCIPAL}"
        retrieval = [s for s in spans if s.name == "retrieval" and s.parent and s.parent.span_id == call.context.span_id]
        assert retrieval, "the retrieval stage is a child of the tool call's span"
    assert len({c.parent.span_id for c in calls}) == 2  # each call under its own request
