"""A source sync's one trace: the operator's span, the worker's (a real subprocess, as sync_mode subprocess
runs it), and the engine's ingestion through the worker's HTTP calls, all received by a real collector."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from ragengine.app import create_app
from ragengine.settings import EngineSettings
from ragengine_operator.settings import OperatorSettings
from ragengine_operator.sources import traced
from ragengine_operator.sources.protocol import Prepared, SyncRequest
from ragengine_operator.sources.sync import policy_settings
from ragengine_operator.syncer.runner import SourceSyncer, Target
from tests.support.embedding import serve_engine
from tests.support.otelcol import collector
from tests.support.server import serve_app

CANARY = "quokkacanary5512"  # in the synced document: never in a span


def files_app() -> FastAPI:
    app = FastAPI()

    @app.get("/faq.txt", response_class=PlainTextResponse)
    def faq() -> str:
        return f"The engine syncs this page from an HTTP source. {CANARY}"

    return app


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_sync_is_one_trace_from_the_operator_through_the_worker_into_the_engine(
        embedder, monkeypatch, tmp_path, protocol):
    with collector(tmp_path / "otelcol") as otelcol:
        endpoint = otelcol.grpc if protocol == "grpc" else otelcol.http + "/v1/traces"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
        engine = create_app(EngineSettings(data_dir=tmp_path / "engine"))
        with serve_engine(engine, embedder) as base, serve_app(files_app(), ready_path="/faq.txt") as files:
            source = {"name": "faq", "index": "docs", "http": {"urls": [f"{files}/faq.txt"]}}
            # the files server is on loopback, which the egress rules refuse unless the operator allows it
            allowed = policy_settings(OperatorSettings(sources_egress_allow=["127.0.0.0/8"]))
            request = SyncRequest("sync", "faq", "docs", base, source, fetch_policy=allowed)
            target = Target("team-a", "docs", "uid-1", (), (), True, None, tracing=(endpoint, protocol, 1.0))
            syncer = SourceSyncer(SimpleNamespace(settings=OperatorSettings(sync_mode="subprocess"), dyn=None))
            result = asyncio.run(syncer.dispatch(target, Prepared(request)))
            assert result.ok and result.written == 1, result
            traced.flush()
            spans = otelcol.wait_for(lambda s: {"source_sync", "sync_worker", "index_write"} <= {x["name"] for x in s})
    ours = [s for s in spans if s["traceId"] == next(x["traceId"] for x in spans if x["name"] == "source_sync")]
    by_id = {s["spanId"]: s for s in ours}
    root = next(s for s in ours if s["name"] == "source_sync")
    assert root["service"] == "ragengine-operator" and not root.get("parentSpanId")
    assert root["attrs"]["ragengine.name"] == "docs" and root["attrs"]["sync.written"] == 1
    worker = next(s for s in ours if s["name"] == "sync_worker")
    assert worker["service"] == "ragengine-sync" and worker["parentSpanId"] == root["spanId"]
    write = next(s for s in ours if s["name"] == "index_write")
    assert write["attrs"]["ragengine.index"] == "docs" and write["attrs"]["ragengine.operation"] == "add"
    # index_write <- the engine's server span <- the worker's HTTP client span <- sync_worker
    server = by_id[write["parentSpanId"]]
    client = by_id[server["parentSpanId"]]
    assert (server["service"], client["service"]) == ("ragengine", "ragengine-sync")
    assert client["parentSpanId"] == worker["spanId"]
    assert CANARY not in otelcol.raw()
