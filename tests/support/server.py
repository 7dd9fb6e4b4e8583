"""Run a real uvicorn server for an ASGI app on a free loopback port, inside the test process."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve_app(app, *, ready_path: str = "/health", timeout_s: float = 120.0, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields the base URL ("http://HOST:PORT").
    ``host``: the machine's own address for servers that containers and pods must reach."""
    port = free_port()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    base = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if not thread.is_alive():
            raise RuntimeError(f"server on port {port} exited during start-up")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + ready_path, timeout=2.0).status_code < 500:
                break
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"server on port {port} not ready after {timeout_s} s")
        time.sleep(0.05)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)
