"""SIGTERM drains before the engine closes: a client's kept-alive connection is told to close, not cut.

On the real node, 1 of 1443 requests of a client looping through the Service failed with
RemoteProtocolError during a rolling update: the old pod's uvicorn closed the client's idle keep-alive
connection at SIGTERM just as the client sent its next request on it. The engine now serves on for
``shutdown_drain_seconds`` after SIGTERM, answering with ``Connection: close`` (ragengine/shutdown.py).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from tests.support.engine_process import engine_process


def test_sigterm_keeps_serving_kept_alive_connections_and_tells_them_to_close(tmp_path: Path):
    with engine_process(tmp_path, llm=False, settings={"shutdown_drain_seconds": "4"}) as engine:
        with httpx.Client(base_url=engine.base_url, timeout=10) as http:
            first = http.get("/health")
            assert first.status_code == 200 and first.headers.get("connection") != "close"  # kept alive
            assert http.get("/ready").status_code == 200
            engine.process.send_signal(signal.SIGTERM)
            time.sleep(1.0)  # the signal is handled; the drain (4 s) is not over
            during = http.get("/health")  # on the connection kept alive before the signal
            assert during.status_code == 200
            assert during.headers["connection"] == "close"
            ready = http.get("/ready")  # a new connection: still accepted while draining
            assert ready.status_code == 503 and ready.json() == {"ready": False, "reason": "shutting down"}
            assert ready.headers["connection"] == "close"
        started = time.monotonic()
        assert engine.process.wait(30) == 0  # then a graceful stop
        assert time.monotonic() - started < 20


def test_without_a_drain_sigterm_stops_at_once(tmp_path: Path):
    """The default outside Kubernetes: ``ragengine serve`` stops on SIGTERM as soon as its requests are done."""
    with engine_process(tmp_path, llm=False) as engine:
        assert httpx.get(f"{engine.base_url}/ready", timeout=10).status_code == 200
        started = time.monotonic()
        engine.process.send_signal(signal.SIGTERM)
        engine.process.wait(30)
        assert time.monotonic() - started < 3.5  # no drain of several seconds
