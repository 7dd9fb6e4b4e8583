"""What a hostile HTTP server answers (a tenant's engine image, a source's URL), as routes of
``tests.support.web.web_server``:

- ``flood(total)``: 200 and a JSON object of ``total`` bytes, valid to the end (a reader that takes it whole
  also parses it), with no Content-Length (read until the server closes), streamed from one 1 MiB piece;
- ``trickle(stop)``: 200, headers promising a 100 kB JSON body, then one byte every ``every_s`` (1.5 s, as
  the review's attack: each read well within a 2 s read timeout) until ``stop`` is set or ``for_s`` passed;
- ``answer(obj)``: a prompt, well-formed JSON answer.

Each route stops writing as soon as the client goes away.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

MiB = 1024 * 1024
Handler = Callable[[BaseHTTPRequestHandler], None]


def flood(total: int, status: int = 200) -> Handler:
    head, tail = b'{"status": "Healthy", "indexes": {}, "pad": "', b'"}'
    piece = b"x" * MiB

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.protocol_version = "HTTP/1.0"  # the body ends when the connection does: nothing declares its size
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(head)
        left = total - len(head) - len(tail)
        while left > 0:
            handler.wfile.write(piece[:left])
            left -= len(piece)
        handler.wfile.write(tail)
        handler.close_connection = True

    return route


def trickle(stop: threading.Event, every_s: float = 1.5, for_s: float = 120.0) -> Handler:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "100000")  # within any cap: only the time can stop it
        handler.end_headers()
        handler.wfile.flush()
        sent = 0
        while not stop.is_set() and sent * every_s < for_s:
            handler.wfile.write(b" ")  # JSON whitespace: the body stays valid as far as it goes
            handler.wfile.flush()
            sent += 1
            stop.wait(every_s)
        handler.close_connection = True

    return route


def answer(obj: Any, status: int = 200) -> Handler:
    body = json.dumps(obj).encode()

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return route
