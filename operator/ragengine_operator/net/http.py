"""Bounded HTTP over httpcore: one total deadline per call, a byte cap on the body, pinned connects.

- ``Deadline``: the wall clock of a call (or of a fetch of many calls). Every connect, socket read and
  write waits at most until it, so a server that trickles a byte a second is cut at the deadline, not at
  some multiple of a read timeout (a per-read timeout never fires while bytes keep coming).
- ``exchange``: one request, no redirects, its response streamed (the body unread). The URL's host is
  resolved here, within the deadline, and with an egress policy checked (egress.py); the connection goes to
  the address resolved, whatever a later DNS answer says (the URL keeps the name, so Host, TLS SNI and the
  certificate check are for the name). No proxy from the environment: a proxy would resolve names itself.
- ``pinned_get``: a GET following redirects here, at most ``max_redirects``, http(s) only, every hop
  resolved and checked again; the bearer token goes to the first URL's origin only.
- ``iter_body`` / ``read_body``: the body decoded here (gzip or deflate, nothing else is accepted), cut as
  soon as the *decoded* size passes the cap: a 300 KB gzip bomb costs the cap, not 300 MB.
- ``request``: one call read whole, under a deadline and a cap: what the operator asks a tenant's engine.

Failures: ``FetchError`` with a message fit for a status line (``Refused`` by the egress policy,
``Unreachable``: the connection was never made, so nothing was sent; ``DeadlinePassed``), and ``TooLarge``
when a body passes its cap.
"""

from __future__ import annotations

import contextlib
import functools
import json
import ssl
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from .egress import EgressDenied, EgressPolicy, pin, resolve

REDIRECTS = frozenset({301, 302, 303, 307, 308})
READ_TIMEOUT_S = 60.0  # per network operation, where a caller wants less than its deadline
ACCEPT_ENCODING = "gzip, deflate"
USER_AGENT = "ragengine-operator"
Headers = Iterable[tuple[str, str]] | dict[str, str]


class FetchError(Exception):
    """The call could not be made or finished: refused, unreachable, a broken stream, past its deadline."""


class Refused(FetchError):
    """The egress policy refuses the host: it was not contacted."""


class Unreachable(FetchError):
    """The connection could not be made: nothing was sent, so the call may be repeated (a write too)."""


class DeadlinePassed(FetchError):
    """The call's deadline passed."""


class TooLarge(Exception):
    """The body passed its byte cap (counted decoded)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the body is larger than {limit} bytes (the limit)")
        self.limit = limit


class Deadline:
    """The wall clock of one call or fetch: every step asks how long it may still take."""

    def __init__(self, seconds: float, clock=time.monotonic, label: str = "the fetch deadline") -> None:
        self.seconds, self.clock, self.label = seconds, clock, label
        self.at = clock() + seconds

    def remaining(self) -> float:
        left = self.at - self.clock()
        if left <= 0:
            raise self.error()
        return left

    def passed(self) -> bool:
        return self.at <= self.clock()

    def error(self, what: str = "the fetch") -> DeadlinePassed:
        return DeadlinePassed(f"{what} did not finish within {self.seconds:g} s ({self.label})")


class _Stream(httpcore.NetworkStream):
    """A socket whose every read and write waits at most until the deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self.inner, self.deadline = inner, deadline

    def _timeout(self, timeout: float | None) -> float:
        left = self.deadline.remaining()  # DeadlinePassed once passed
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._timeout(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self._timeout(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self.inner.start_tls(ssl_context, server_hostname, self._timeout(timeout)), self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the address resolved (and checked), whatever the URL's host."""

    def __init__(self, address: str, deadline: Deadline) -> None:
        self.address, self.deadline, self.inner = address, deadline, httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        left = self.deadline.remaining()
        stream = self.inner.connect_tcp(self.address, port, left if timeout is None else min(timeout, left),
                                        local_address, socket_options)
        return _Stream(stream, self.deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        raise Refused("unix sockets are not reached")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


@dataclass
class Response:
    status_code: int
    headers: httpx.Headers
    chunks: Iterator[bytes]  # the raw (still encoded) body, as it arrives


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()  # certifi's roots, loaded once (an SSLContext is shared across threads)


def _address(url: httpx.URL, policy: EgressPolicy | None, deadline: Deadline) -> str:
    """The address to connect to: checked by ``policy`` when given; else resolved as the system would (the
    operator's own target, a Service name through the DNS search path), in both cases within the deadline."""
    host = url.raw_host.decode("ascii")
    port = url.port or (443 if url.scheme == "https" else 80)
    if policy is not None:
        try:
            return str(pin(host, port, policy, timeout=deadline.remaining()).address)
        except EgressDenied as exc:
            raise Refused(f"{url}: refused by the egress policy: {exc}") from None
    found = resolve(host, port, deadline.remaining(), search=True)
    if not found:
        raise Unreachable(f"{url} unreachable (host {host} does not resolve)")
    return str(sorted(found, key=lambda a: a.version)[0])  # IPv4 first, as most clients


_TRANSPORT_ERRORS = (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
                     httpcore.ConnectionNotAvailable, ssl.SSLError, OSError)


@contextlib.contextmanager
def exchange(method: str, url: str | httpx.URL, deadline: Deadline, *, policy: EgressPolicy | None = None,
             headers: Headers = (), content: bytes | None = None, timeout: float = READ_TIMEOUT_S,
             what: str | None = None) -> Iterator[Response]:
    """One request, streamed: yields the response with its body unread (read it within the block). Raises
    ``FetchError`` (Refused, Unreachable, DeadlinePassed, or a broken exchange) with the reason."""
    try:
        target = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise FetchError(f"{url}: invalid URL ({exc})") from None
    if target.scheme not in ("http", "https"):
        raise Refused(f"{url}: only http and https are reached")
    what = what or f"{method} {url}"
    address = _address(target, policy, deadline)
    sent = [(k, v) for k, v in (headers.items() if isinstance(headers, dict) else headers)
            if k.lower() not in ("accept-encoding", "user-agent")]
    sent += [("Accept-Encoding", ACCEPT_ENCODING), ("User-Agent", USER_AGENT)]
    limit = min(timeout, deadline.remaining())
    try:
        with httpcore.ConnectionPool(ssl_context=_ssl_context() if target.scheme == "https" else None,
                                     max_connections=1, retries=0,
                                     network_backend=_PinnedBackend(address, deadline)) as pool, \
                pool.stream(method, str(target), headers=sent, content=content, extensions={"timeout": {
                    "connect": limit, "read": limit, "write": limit, "pool": limit}}) as raw:
            yield Response(raw.status, httpx.Headers(raw.headers), raw.iter_stream())
    except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
        if deadline.passed():
            raise deadline.error(what) from None
        raise Unreachable(f"{url} unreachable ({type(exc).__name__}: {exc})") from None
    except httpcore.TimeoutException as exc:
        if deadline.passed():
            raise deadline.error(what) from None
        raise FetchError(f"{url} unreachable (timed out: {exc or type(exc).__name__})") from None
    except _TRANSPORT_ERRORS as exc:
        raise FetchError(f"{url} unreachable ({type(exc).__name__}: {exc})") from None


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return url.scheme, url.raw_host, url.port


@contextlib.contextmanager
def pinned_get(url: str, policy: EgressPolicy, deadline: Deadline, *, headers: dict[str, str] | None = None,
               token: str | None = None, max_redirects: int = 5, follow_redirects: bool = True,
               timeout: float = READ_TIMEOUT_S) -> Iterator[tuple[str, Response]]:
    """Stream ``GET url`` under ``policy``: yields (the final URL, the response, body unread). Raises
    FetchError with the reason (refused by the egress policy, unreachable, too many redirects, past the
    deadline). With ``follow_redirects=False`` a redirect is the response."""
    try:
        first = current = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise FetchError(f"{url}: invalid URL ({exc})") from None
    for hop in range(max_redirects + 1):
        via = f" (redirected to {current})" if hop else ""
        if current.scheme not in ("http", "https"):
            raise FetchError(f"{url}: a redirect to {current.scheme}:// is not followed{via}")
        send = dict(headers or {})
        if token and _origin(current) == _origin(first):
            send["Authorization"] = f"Bearer {token}"
        try:
            with exchange("GET", current, deadline, policy=policy, headers=send, timeout=timeout,
                          what=f"GET {url}") as resp:
                location = resp.headers.get("location")
                if not (follow_redirects and resp.status_code in REDIRECTS and location):
                    yield str(current), resp
                    return
        except Refused as exc:
            raise Refused(f"{url}: {str(exc).removeprefix(f'{current}: ')}{via}") from None
        except DeadlinePassed:
            raise
        except FetchError as exc:
            raise type(exc)(f"{exc}{via}") from None
        try:
            current = current.join(location)
        except httpx.InvalidURL as exc:
            raise FetchError(f"{url}: redirect to an invalid URL ({exc}){via}") from None
    raise FetchError(f"{url}: more than {max_redirects} redirects")


class _Inflate:
    """gzip or deflate, never more than the room left per call (a bomb cannot expand in one step)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.z = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS)
        self.started = False

    def feed(self, data: bytes, room: int) -> bytes:
        if not self.started and self.encoding == "deflate":
            self.started = True
            try:  # "deflate" is zlib-wrapped by the RFC, raw by some servers (as httpx accepts)
                return self._run(data, room)
            except zlib.error:
                self.z = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._run(data, room)

    def _run(self, data: bytes, room: int) -> bytes:
        out = bytearray()
        while data:
            piece = self.z.decompress(data, max(room - len(out), 0) + 1)
            out += piece
            if len(out) > room:
                return bytes(out)  # the caller sees it pass the limit
            data = self.z.unconsumed_tail
        return bytes(out)


def iter_body(resp: Response, limit: int, deadline: Deadline, what: str = "reading the body") -> Iterator[bytes]:
    """The decoded body in pieces; TooLarge as soon as it passes ``limit`` bytes in all, FetchError for an
    encoding other than gzip / deflate, a broken stream or the deadline."""
    encodings = [e.strip().lower() for e in resp.headers.get("content-encoding", "").split(",")]
    encodings = [e for e in encodings if e and e != "identity"]
    if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "x-gzip", "deflate")):
        raise FetchError(f"unsupported Content-Encoding {', '.join(encodings)} (gzip or deflate only)")
    declared = resp.headers.get("content-length", "")
    if not encodings and declared.isdigit() and int(declared) > limit:
        raise TooLarge(limit)
    inflate = _Inflate(encodings[0]) if encodings else None
    size = 0
    try:
        for chunk in resp.chunks:
            deadline.remaining()
            piece = inflate.feed(chunk, limit - size) if inflate else chunk
            size += len(piece)
            if size > limit:
                raise TooLarge(limit)
            if piece:
                yield piece
    except zlib.error as exc:
        raise FetchError(f"broken {encodings[0]} body ({exc})") from None
    except httpcore.TimeoutException:
        raise deadline.error(what) if deadline.passed() else FetchError(
            "the server stopped sending the body (read timed out)") from None
    except _TRANSPORT_ERRORS as exc:
        raise FetchError(f"the body could not be read ({type(exc).__name__}: {exc})") from None


def read_body(resp: Response, limit: int, deadline: Deadline) -> bytes:
    """The whole decoded body (see ``iter_body``)."""
    return b"".join(iter_body(resp, limit, deadline))


@dataclass(frozen=True)
class Reply:
    status_code: int
    headers: httpx.Headers
    content: bytes

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not (nesting too deep for the parser included)."""
        try:
            return json.loads(self.content)
        except RecursionError:
            raise ValueError("the JSON is nested too deeply") from None


def request(method: str, url: str, *, timeout_s: float, max_bytes: int, headers: Headers = (),
            content: bytes | None = None, policy: EgressPolicy | None = None) -> Reply:
    """One call, read whole within ``timeout_s`` (all of it: resolving, connecting, the answer) and at most
    ``max_bytes`` of body. FetchError or TooLarge otherwise."""
    deadline = Deadline(timeout_s, label="the call's deadline")
    with exchange(method, url, deadline, policy=policy, headers=headers, content=content) as resp:
        body = b"".join(iter_body(resp, max_bytes, deadline, f"{method} {url}"))
        return Reply(resp.status_code, resp.headers, body)
