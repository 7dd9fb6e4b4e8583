"""The operator's calls to a tenant's engine are bounded (issue 41, finding 1): the engine's image is the
tenant's, so GET /health, GET /ready of an unready pod and the source syncs' reads and writes each run under
one total deadline and a byte cap, against real hostile servers on loopback.

Before: ``engine_health`` read a flooded /health whole (the review saw the operator go from 60 to 1,660 MiB)
and a /health trickling one byte every 1.5 s held the call (and the reconcile's thread) for as long as it
trickled, since its 2 s timeout applied to each socket read. Memory is this process's peak resident set,
reset before each attack; hangs are caught by a limit only a call without a deadline gets near.
"""

from __future__ import annotations

import gzip
import threading
import time

import httpx
import pytest

from ragengine_operator import constants as c
from ragengine_operator.kube.observe import HEALTH_MAX_BYTES, engine_health, engine_readiness_reason
from ragengine_operator.net.http import FetchError, TooLarge, request
from ragengine_operator.net.transport import BoundedTransport, DeadlineExceeded, ResponseTooLarge
from ragengine_operator.sources.engine import EngineClient, EngineUnavailable
from tests.support.bounded import peak_kib, reset_peak, within
from tests.support.hostile_http import answer, flood, trickle
from tests.support.server import refused_port
from tests.support.web import web_server

MiB = 1024 * 1024
HANG = 25.0  # seconds: a bounded call ends after its deadline (1-2 s); the trickle goes on for 60 s
HEALTHY = {"status": "Healthy", "indexes": {"docs": {"version": 1, "current": True, "documents": 3}}}


@pytest.fixture
def stop():
    event = threading.Event()
    yield event
    event.set()  # every trickle ends with the test


def test_a_flooded_health_is_cut_at_the_cap_in_bounded_memory():
    total = 256 * MiB
    with web_server({"/health": flood(total), "/ok/health": answer(HEALTHY)}) as engine:
        before = reset_peak()
        health, error = within(HANG, lambda: engine_health(engine.base))
        grew_mib = (peak_kib() - before) / 1024
        assert engine_health(engine.url("/ok")) == (HEALTHY, None)  # a well-behaved engine is read as before
    print(f"\n/health flooded with {total // MiB} MiB: peak RSS growth {grew_mib:.1f} MiB "
          f"(cap {HEALTH_MAX_BYTES // 1024} KiB); {error}")
    assert health is None and f"larger than {HEALTH_MAX_BYTES} bytes" in error
    assert grew_mib < 48, f"peak RSS grew {grew_mib:.0f} MiB for a {total // MiB} MiB /health"


def test_a_trickling_health_ends_at_its_deadline(stop):
    with web_server({"/health": trickle(stop, for_s=60)}) as engine:
        started = time.monotonic()
        health, error = within(HANG, lambda: engine_health(engine.base))
        took = time.monotonic() - started
    print(f"\n/health trickling a byte every 1.5 s: engine_health returned after {took:.1f} s: {error}")
    assert health is None and "did not finish within 2 s" in error


def test_readiness_asks_an_unready_pod_within_bounds(stop, monkeypatch):
    pod = {"metadata": {"name": "e-0"}, "status": {"phase": "Running", "podIP": "127.0.0.1",
                                                     "conditions": [{"type": "Ready", "status": "False"}]}}
    routes = {"/ready": trickle(stop, for_s=60)}
    with web_server(routes) as engine:
        monkeypatch.setattr(c, "ENGINE_PORT", int(engine.base.rsplit(":", 1)[1]))
        assert within(HANG, lambda: engine_readiness_reason([pod])) is None  # cut at 1 s: nothing claimed
        routes["/ready"] = flood(64 * MiB, status=503)
        assert within(HANG, lambda: engine_readiness_reason([pod])) is None  # cut at 64 KiB
        routes["/ready"] = answer({"status": "NotReady", "reason": "the index store did not answer"}, status=503)
        assert engine_readiness_reason([pod]) == "the index store did not answer"


def test_the_sync_workers_engine_client_is_bounded(stop):
    routes = {"/indexes/docs/documents": trickle(stop, for_s=60)}
    with web_server(routes) as engine:
        client = EngineClient(engine.base, timeout=2.0)
        with pytest.raises(EngineUnavailable, match="did not finish within 2 s"):
            within(HANG, lambda: client.has_index("docs"))
        routes["/indexes/docs/documents"] = flood(64 * MiB)
        client = EngineClient(engine.base, max_bytes=MiB)
        with pytest.raises(EngineUnavailable, match=f"answer was refused: .*larger than {MiB} bytes"):
            within(HANG, lambda: client.has_index("docs"))
        routes["/indexes/docs/documents"] = answer({"documents": [], "total_items": 0})
        assert client.has_index("docs") is True
        client.close()


def test_the_bounded_transport_decodes_within_its_cap_and_reports_httpx_errors(stop):
    bomb = gzip.compress(b"{}" + b" " * (64 * MiB), compresslevel=9)
    small = gzip.compress(b'{"fine": true}')
    routes = {
        "/bomb": lambda h: _send(h, {"Content-Encoding": "gzip"}, bomb),
        "/small": lambda h: _send(h, {"Content-Encoding": "gzip"}, small),
        "/declared": lambda h: _send(h, {"Content-Length": str(2 * MiB)}, b""),
        "/slow": trickle(stop, every_s=0.2, for_s=60),
    }
    with web_server(routes) as site, httpx.Client(transport=BoundedTransport(1.0, MiB), base_url=site.base) as http:
        with pytest.raises(ResponseTooLarge, match=f"larger than {MiB} bytes"):
            http.get("/bomb")
        reply = http.get("/small")
        assert reply.json() == {"fine": True} and "content-encoding" not in reply.headers
        with pytest.raises(ResponseTooLarge):  # refused from its declared length, before any of it is read
            http.get("/declared")
        with pytest.raises(DeadlineExceeded, match="did not finish within 1 s"):
            within(HANG, lambda: http.get("/slow"))
    with refused_port() as port, httpx.Client(transport=BoundedTransport(1.0, MiB)) as http, \
            pytest.raises(httpx.ConnectError, match="Connection refused"):
        http.get(f"http://127.0.0.1:{port}/")


def test_request_reads_whole_answers_only_within_its_bounds(stop):
    with web_server({"/a": answer([1, 2, 3]), "/flood": flood(8 * MiB), "/deep": lambda h: _send(
            h, {}, b"[" * 200_000)}) as site:
        reply = request("GET", site.url("/a"), timeout_s=2, max_bytes=1024)
        assert reply.status_code == 200 and reply.json() == [1, 2, 3]
        with pytest.raises(TooLarge):
            request("GET", site.url("/flood"), timeout_s=10, max_bytes=MiB)
        with pytest.raises(ValueError, match=r"nested too deeply|Expecting"):  # never a RecursionError
            request("GET", site.url("/deep"), timeout_s=10, max_bytes=MiB).json()
    with pytest.raises(FetchError, match="does not resolve"):
        request("GET", "http://no-such-host.invalid/", timeout_s=5, max_bytes=1024)


def _send(handler, headers: dict[str, str], body: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    for k, v in headers.items():
        handler.send_header(k, v)
    if "Content-Length" not in headers:
        handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
