"""A small real HTTP server on loopback for the sources' hostile-input tests: each path answers a fixed
response, or runs a function that writes whatever it likes (a trickle, a redirect, a held request).

    with web_server({"/a.txt": (200, {"Content-Type": "text/plain"}, b"hello")}) as site:
        site.url("/a.txt"); site.seen   # [(path, headers), ...] of every request received

``host`` may be any loopback address (127.0.0.2 is "another host" on Linux).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Fixed = tuple[int, dict[str, str], bytes]
Route = Fixed | Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Site:
    base: str
    routes: dict[str, Route]
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path


def send(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
    handler.send_response(status)
    for k, v in headers.items():
        handler.send_header(k, v)
    if "Content-Length" not in headers:
        handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextlib.contextmanager
def web_server(routes: dict[str, Route], host: str = "127.0.0.1") -> Iterator[Site]:
    site = Site("", routes)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            site.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            route = site.routes.get(self.path.split("?")[0])
            if route is None:
                send(self, 404, {}, b"")
            elif callable(route):
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                    route(self)
            else:
                send(self, *route)

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    site.base = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
