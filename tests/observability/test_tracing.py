"""One trace per answer, received by a real OpenTelemetry Collector (tests/support/otelcol.py).

The engine is the production app on uvicorn with its real FAISS + BM25 index and the packaged embedding
model; the LLM is the project's test server (tests/llm_server), which records the headers it receives.
The exporter is configured only by the standard OTEL_* variables, as a deployment configures it.
"""

from __future__ import annotations

import io
import json
import logging
import time
import uuid

import httpx
import pytest

from ragengine.app import create_app
from ragengine.observability import logs
from ragengine.settings import EngineSettings
from tests.llm_server import FakeLLM, create_llm_app
from tests.support.embedding import serve_engine
from tests.support.otelcol import Collector, collector
from tests.support.server import serve_app

# Sits in an indexed document: no exported span may contain it unless trace_content is on.
CANARY = "zebracanary7341"
QUESTION = "How does KAITO provision GPU nodes for vLLM?"  # the user's words: not exported either
DOCS = [
    {"doc_id": "kaito-1", "text": f"KAITO provisions GPU nodes with Karpenter and runs vLLM on them. {CANARY}"},
    {"doc_id": "faiss-1", "text": "FAISS is a library for efficient similarity search of dense vectors."},
]
# The stages of a chat completion with retrieval, and the parent each must have.
PARENTS = {
    "retrieval": None,  # a child of the request's server span (checked below)
    "embedding": "retrieval",
    "dense_search": "retrieval",
    "keyword_search": "retrieval",
    "fusion": "retrieval",
    "context_selection": None,
    "llm_call": None,
}


@pytest.fixture(scope="module")
def otelcol(tmp_path_factory) -> Collector:
    with collector(tmp_path_factory.mktemp("otelcol")) as c:
        yield c


@pytest.fixture(scope="module")
def llm():
    fake = FakeLLM()
    with serve_app(create_llm_app(fake)) as base:
        yield fake, base + "/v1"


def start_engine(monkeypatch, tmp_path, embedder, llm_url: str, env: dict[str, str], **settings):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = create_app(EngineSettings(data_dir=tmp_path, llm_url=llm_url, llm_retries=0, similarity_threshold=0.0,
                                    **settings))
    return app, serve_engine(app, embedder)


def index(base: str) -> None:
    r = httpx.post(f"{base}/index", json={"index_name": "docs", "documents": DOCS}, timeout=120)
    assert r.status_code == 200, r.text


def chat(base: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"index_name": "docs", "messages": [{"role": "user", "content": QUESTION}]}
    r = httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers or {}, timeout=60)
    assert r.status_code == 200, r.text
    return r


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def of_trace(spans: list[dict], trace_id: str) -> list[dict]:
    return [s for s in spans if s["traceId"] == trace_id and s["service"] == "ragengine"]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_chat_trace_has_the_stages_in_order_and_continues_the_callers_trace(
        otelcol, llm, embedder, monkeypatch, tmp_path, protocol):
    fake, llm_url = llm
    endpoint = otelcol.grpc if protocol == "grpc" else otelcol.http + "/v1/traces"
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url, {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol})
    trace_id, caller_span, header = traceparent()
    with served as base:
        index(base)
        fake.reset()
        r = chat(base, {"traceparent": header, "x-request-id": "req-trace-1"})
        assert r.headers["x-request-id"] == "req-trace-1"
        spans = otelcol.wait_for(lambda s: any(x["name"] == "llm_call" for x in of_trace(s, trace_id)))
    spans = of_trace(spans, trace_id)
    by_name = {s["name"]: s for s in spans}
    by_id = {s["spanId"]: s for s in spans}
    # The server span continues the caller's trace: its parent is the caller's span.
    server = next(s for s in spans if s["kind"] == 2 or s["kind"] == "SPAN_KIND_SERVER")
    assert server["parentSpanId"] == caller_span
    assert server["attrs"]["ragengine.request_id"] == "req-trace-1"
    for name, parent in PARENTS.items():
        assert name in by_name, (name, sorted(by_name))
        expected = server["spanId"] if parent is None else by_name[parent]["spanId"]
        assert by_name[name]["parentSpanId"] == expected, (name, by_id.get(by_name[name]["parentSpanId"], {}).get("name"))
    retrieval = by_name["retrieval"]["attrs"]
    assert retrieval["ragengine.index"] == "docs" and retrieval["ragengine.hits"] == 2
    assert set(retrieval["ragengine.doc_ids"]) == {"kaito-1", "faiss-1"}
    assert by_name["context_selection"]["attrs"]["ragengine.selected"] == 2
    call = by_name["llm_call"]["attrs"]
    assert call["gen_ai.request.model"] is None or isinstance(call["gen_ai.request.model"], str)
    assert call["gen_ai.usage.input_tokens"] > 0 and call["llm.fallback"] is False
    # The LLM received the trace: its traceparent's parent is the engine's HTTP client span under llm_call.
    sent = [r for r in fake.requests if r["path"] == "/v1/chat/completions"]
    assert len(sent) == 1
    version, got_trace, got_parent, flags = sent[0]["headers"]["traceparent"].split("-")
    assert (version, got_trace, int(flags, 16) & 1) == ("00", trace_id, 1)
    client = by_id[got_parent]
    assert client["parentSpanId"] == by_name["llm_call"]["spanId"]
    # No document text and no user content in anything the collector received.
    raw = otelcol.raw()
    assert CANARY not in raw and QUESTION not in raw


def test_trace_content_setting_puts_the_query_into_spans(otelcol, llm, embedder, monkeypatch, tmp_path):
    """The other side of the canary check: the setting is what keeps user content out."""
    _, llm_url = llm
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url,
                               {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc}, trace_content=True)
    trace_id, _, header = traceparent()
    with served as base:
        index(base)
        chat(base, {"traceparent": header})
        spans = otelcol.wait_for(lambda s: any(x["name"] == "retrieval" for x in of_trace(s, trace_id)))
    retrieval = next(s for s in of_trace(spans, trace_id) if s["name"] == "retrieval")
    assert retrieval["attrs"]["ragengine.query"] == QUESTION


def test_sampling_ratio_zero_exports_only_what_the_caller_sampled(otelcol, llm, embedder, monkeypatch, tmp_path):
    fake, llm_url = llm
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url, {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0"})
    trace_id, _, header = traceparent()
    with served as base:
        index(base)
        fake.reset()
        chat(base, {"x-request-id": "not-sampled"})
        chat(base, {"traceparent": header, "x-request-id": "sampled-by-caller"})
        # Spans are exported in the order they end: once the second request's are in, the first's would be.
        spans = otelcol.wait_for(lambda s: any(x["name"] == "llm_call" for x in of_trace(s, trace_id)))
    ids = {s["attrs"].get("ragengine.request_id") for s in spans}
    assert "sampled-by-caller" in ids and "not-sampled" not in ids
    # The unsampled request still tells vLLM its (unsampled) trace, so vLLM does not sample it either.
    first = next(r for r in fake.requests if r["path"] == "/v1/chat/completions")
    assert int(first["headers"]["traceparent"].split("-")[3], 16) & 1 == 0  # the sampled flag is off


def test_tracing_off_without_an_endpoint(llm, embedder, monkeypatch, tmp_path):
    fake, llm_url = llm
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url, {})
    assert not app.state.tracing.enabled
    with served as base:
        index(base)
        fake.reset()
        r = chat(base)
    assert len(r.headers["x-request-id"]) == 32  # a new id
    sent = [r for r in fake.requests if r["path"] == "/v1/chat/completions"]
    assert "traceparent" not in sent[0]["headers"]


def test_request_ids_and_the_json_access_line(otelcol, llm, embedder, monkeypatch, tmp_path):
    _, llm_url = llm
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url,
                               {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc})
    sink = io.StringIO()
    handler = logs.handler("json", sink)
    access = logging.getLogger("ragengine.requests")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    trace_id, _, header = traceparent()
    try:
        with served as base:
            index(base)
            chat(base, {"traceparent": header, "x-request-id": "req-log-1"})
            bad = httpx.post(f"{base}/v1/chat/completions", json={"messages": "nope"},
                             headers={"x-request-id": "x" * 200}, timeout=30)  # too long: replaced
            missing = httpx.get(f"{base}/indexes/nope/documents", timeout=30)
    finally:
        access.removeHandler(handler)
    assert bad.status_code == 400 and len(bad.headers["x-request-id"]) == 32
    assert missing.status_code == 404 and len(missing.headers["x-request-id"]) == 32
    lines = [json.loads(line) for line in sink.getvalue().splitlines()]
    mine = next(x for x in lines if x.get("request_id") == "req-log-1")
    assert mine["route"] == "/v1/chat/completions" and mine["status"] == 200 and mine["method"] == "POST"
    assert mine["duration_ms"] > 0 and mine["trace_id"] == trace_id and mine["logger"] == "ragengine.requests"
    assert {x["request_id"] for x in lines if x.get("status") == 400} == {bad.headers["x-request-id"]}


def test_an_uploads_ingestion_is_a_child_of_the_upload_request(otelcol, llm, embedder, monkeypatch, tmp_path):
    _, llm_url = llm
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url,
                                {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc})
    trace_id, _, header = traceparent()
    with served as base:
        r = httpx.post(f"{base}/v1/files", files={"file": ("notes.txt", f"Upload notes. {CANARY}".encode(), "text/plain")},
                       headers={"traceparent": header}, timeout=60)
        assert r.status_code == 202, r.text
        spans = otelcol.wait_for(lambda s: any(x["name"] == "ingestion" and x["attrs"].get("ragengine.status")
                                               for x in of_trace(s, trace_id)))
    spans = of_trace(spans, trace_id)
    by_name = {s["name"]: s for s in spans}
    server = next(s for s in spans if s["kind"] in (2, "SPAN_KIND_SERVER"))
    ingestion = by_name["ingestion"]
    assert ingestion["parentSpanId"] == server["spanId"] and ingestion["attrs"]["ragengine.status"] == "completed"
    assert ingestion["attrs"]["ragengine.file_id"] == r.json()["file_id"]
    # Parsed once, when accepted (the bounded parser's 422 is the upload's answer): in the upload request.
    assert by_name["parse"]["parentSpanId"] == server["spanId"]
    assert by_name["index_write"]["parentSpanId"] == ingestion["spanId"]
    assert CANARY not in otelcol.raw()


def test_text_log_lines_and_ids_on_refused_requests(llm, embedder, monkeypatch, tmp_path):
    """log_format=text, and the id on a 401 (authentication runs inside the request-id middleware)."""
    _, llm_url = llm
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url, {}, api_key="k-secret")
    sink = io.StringIO()
    handler = logs.handler("text", sink)
    access = logging.getLogger("ragengine.requests")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        with served as base:
            refused = httpx.get(f"{base}/indexes", headers={"x-request-id": "no-key-1"}, timeout=30)
    finally:
        access.removeHandler(handler)
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "no-key-1"
    line = next(x for x in sink.getvalue().splitlines() if "request_id=no-key-1" in x)
    assert "ragengine.requests: GET /indexes 401" in line and not line.startswith("{")


def test_a_streamed_answer_after_reformulation(otelcol, llm, embedder, monkeypatch, tmp_path):
    """The reformulation's own LLM call sits under its span; the answer's streamed call ends with the stream."""
    fake, llm_url = llm
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url,
                                {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc}, reformulate=True)
    trace_id, _, header = traceparent()
    messages = [{"role": "user", "content": "What is KAITO?"}, {"role": "assistant", "content": "An operator."},
                {"role": "user", "content": "How does it get GPU nodes?"}]
    with served as base:
        index(base)
        fake.reset()
        with httpx.stream("POST", f"{base}/v1/chat/completions", headers={"traceparent": header}, timeout=60,
                          json={"index_name": "docs", "stream": True, "messages": messages}) as r:
            assert r.status_code == 200
            body = r.read().decode()
        assert body.rstrip().endswith("data: [DONE]")
        spans = otelcol.wait_for(lambda s: sum(x["name"] == "llm_call" for x in of_trace(s, trace_id)) == 2)
    spans = of_trace(spans, trace_id)
    server = next(s for s in spans if s["kind"] in (2, "SPAN_KIND_SERVER"))
    reformulation = next(s for s in spans if s["name"] == "reformulation")
    assert reformulation["parentSpanId"] == server["spanId"]
    assert reformulation["attrs"]["ragengine.outcome"] == "rewritten"
    calls = {s["parentSpanId"]: s for s in spans if s["name"] == "llm_call"}
    assert calls[reformulation["spanId"]]["attrs"]["llm.stream"] is False
    answer = calls[server["spanId"]]
    assert answer["attrs"]["llm.stream"] is True and answer["attrs"]["llm.first_chunk_ms"] > 0
    # Both calls told the LLM their place in the trace.
    assert [r["headers"]["traceparent"].split("-")[1] for r in fake.requests
            if r["path"] == "/v1/chat/completions"] == [trace_id, trace_id]
    assert "How does it get GPU nodes?" not in otelcol.raw()


POLICY = """blockMessage: Blocked by the policy.
scanners:
  - type: regex
    action: redact
    patterns: ['\\bAKIA[0-9A-Z]{16}\\b']
"""
SECRET = "AKIAABCDEFGHIJKLMNOP"


@pytest.mark.parametrize("stream", [False, True])
def test_guardrails_span_says_what_acted_and_never_what_it_redacted(otelcol, llm, embedder, monkeypatch, tmp_path,
                                                                     stream):
    fake, llm_url = llm
    policy = tmp_path / "guardrails.yaml"
    policy.write_text(POLICY)
    _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_url,
                                {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc}, guardrails_policy=policy)
    trace_id, _, header = traceparent()
    with served as base:
        index(base)
        fake.reply = f"The key is {SECRET} here."
        r = httpx.post(f"{base}/v1/chat/completions", headers={"traceparent": header}, timeout=60,
                       json={"index_name": "docs", "stream": stream, "messages": [{"role": "user", "content": "key?"}]})
        assert r.status_code == 200 and SECRET not in r.text
        spans = otelcol.wait_for(lambda s: any(x["name"] == "guardrails" for x in of_trace(s, trace_id)))
    spans = of_trace(spans, trace_id)
    server = next(s for s in spans if s["kind"] in (2, "SPAN_KIND_SERVER"))
    guard = next(s for s in spans if s["name"] == "guardrails")
    assert guard["parentSpanId"] == server["spanId"]
    assert guard["attrs"]["guardrails.action"] == "redact"
    assert guard["attrs"]["ragengine.mode"] == ("stream" if stream else "json")
    assert guard["attrs"]["guardrails.scanners"] == ["regex:redact:1"]
    assert SECRET not in otelcol.raw()


def test_a_session_answer_in_tools_mode(otelcol, embedder, monkeypatch, tmp_path):
    """Tool rounds: each round's LLM call and tool calls under its span, the tool's search under the call."""
    from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app, tool_call

    scripted = ScriptedLLM()
    with serve_app(create_scripted_app(scripted)) as llm_base:
        _app, served = start_engine(monkeypatch, tmp_path, embedder, llm_base + "/v1",
                                    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otelcol.grpc})
        with served as base, httpx.Client(base_url=base, timeout=60) as http:
            r = http.post("/v1/files", files={"file": ("safe.txt", b"The alpha launch code is kept in the blue safe.",
                                                       "text/plain")})
            file_id = r.json()["file_id"]
            deadline = time.monotonic() + 120
            while http.get(f"/v1/files/{file_id}").json()["ingestion_status"] != "completed":
                assert time.monotonic() < deadline, "the upload was not ingested"
                time.sleep(0.05)
            sid = http.post("/v1/sessions", json={"file_ids": [file_id]}).json()["id"]
            scripted.script = [{"content": None, "tool_calls": [tool_call("alpha launch code")]}]
            trace_id, _, header = traceparent()
            r = http.post(f"/v1/sessions/{sid}/messages", json={"content": "Where is the alpha code?", "mode": "tools"},
                          headers={"traceparent": header})
            assert r.status_code == 200, r.text
            spans = otelcol.wait_for(lambda s: any(x["name"] == "groundedness" for x in of_trace(s, trace_id)))
    spans = of_trace(spans, trace_id)
    server = next(s for s in spans if s["kind"] in (2, "SPAN_KIND_SERVER"))
    rounds = sorted((s for s in spans if s["name"] == "tool_round"), key=lambda s: s["attrs"]["ragengine.round"])
    assert [r["parentSpanId"] for r in rounds] == [server["spanId"]] * 2
    assert [r["attrs"]["ragengine.tool_calls"] for r in rounds] == [1, 0]
    call = next(s for s in spans if s["name"] == "tool_call")
    assert call["parentSpanId"] == rounds[0]["spanId"] and call["attrs"]["gen_ai.tool.name"] == "semantic_search"
    assert call["attrs"]["ragengine.hits"] >= 1 and "ragengine.tool.query" not in call["attrs"]
    assert any(s["name"] == "retrieval" and s["parentSpanId"] == call["spanId"] for s in spans)
    assert {s["parentSpanId"] for s in spans if s["name"] == "llm_call"} == {r["spanId"] for r in rounds}
    assert next(s for s in spans if s["name"] == "groundedness")["parentSpanId"] == server["spanId"]
    assert "alpha launch code" not in otelcol.raw()
