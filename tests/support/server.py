"""Real servers on loopback ports that no other process can take: each port is bound (port 0) by the
process that serves it, and the number read back from that bound socket.

- ``serve_app(app)`` runs uvicorn in a background thread of the test process on a socket it bound first.
- ``refused_port()`` holds a port bound but not listening: connecting is refused for as long as the
  context lasts, and no other process can start listening there (a "dead" URL that stays dead).
- ``announced_port(log, proc)`` reads the port a child server printed after binding port 0
  (``ragengine serve --port 0`` and ``python -m tests.llm_server --port 0`` print ``listening on URL``;
  uvicorn itself logs ``Uvicorn running on URL`` at INFO, as llama_cpp.server does).
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn

# How long a server may take to start (the embedding model loads on a busy two-core machine). pytest's
# per-test timeout (pyproject.toml) must leave room for two sequential starts; tests/test_suite_limits.py checks it.
START_TIMEOUT_S = 300.0


def bound_socket(host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to port 0 on ``host``: the kernel's choice, held from now on. No SO_REUSEADDR:
    no other socket can bind the port while this one holds it, listening or not."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    return sock


def port_for_external_server(host: str = "127.0.0.1") -> int:
    """A port number the kernel just handed out, for a server that cannot bind port 0 itself and fails
    loudly when the port is taken meanwhile (a container's published port, a test server started again on
    the same port). Never where a conflict would go unnoticed, such as a readiness check that someone
    else's server could answer."""
    with bound_socket(host) as sock:
        return sock.getsockname()[1]


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where connections are refused while the context lasts (bound, never listening)."""
    sock = bound_socket()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


# Ours, and uvicorn's own INFO line (servers we do not own, such as llama_cpp.server, started with port 0).
_ANNOUNCED = re.compile(r"(?:listening on|Uvicorn running on) http://[^:\s]+:(\d+)")


def announced_port(log: Path, proc: subprocess.Popen, *, offset: int = 0, timeout_s: float = START_TIMEOUT_S) -> int:
    """The port a child server printed (``listening on http://HOST:PORT``) once it had bound port 0, read
    from ``log`` after byte ``offset`` (a restarted server appends to its predecessor's log)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
        found = _ANNOUNCED.search(text)
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before binding:\n{text[-4000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{proc.args!r} announced no port after {timeout_s} s:\n{text[-4000:]}")
        time.sleep(0.05)


@contextlib.contextmanager
def serve_app(app, *, ready_path: str = "/health", timeout_s: float = START_TIMEOUT_S,
              host: str = "127.0.0.1", sock: socket.socket | None = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields the base URL ("http://HOST:PORT").
    ``host``: the machine's own address for servers that containers and pods must reach. ``sock``: a socket
    bound (not listening) earlier, such as ``bound_socket()``'s: refused until the server starts on it."""
    sock = sock if sock is not None else bound_socket(host)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    base = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if not thread.is_alive():
                raise RuntimeError(f"server on port {port} exited during start-up")
            if server.started:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + ready_path, timeout=2.0).status_code < 500:
                        break
            if time.monotonic() > deadline:
                raise TimeoutError(f"server on port {port} not ready after {timeout_s} s")
            time.sleep(0.05)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
