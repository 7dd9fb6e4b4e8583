"""HTTP sources: one document per URL, read under the egress policy, in bounded memory and time.

- ``pinned_get``: every URL and every redirect hop is resolved and checked (egress.py), and the
  connection goes to the address checked (httpcore with a network backend that connects there; the
  URL keeps the name, so Host, TLS SNI and the certificate check are for the name). Every socket read
  and write waits at most until the fetch's deadline. Redirects are followed here, at most
  ``max_redirects``, http(s) only; the bearer token goes to the first URL's origin only. No proxy from
  the environment is used: a proxy would resolve names itself, out of the policy's reach.
- ``read_body``: the body streamed and decoded here (gzip or deflate, nothing else is accepted), cut as
  soon as the *decoded* size passes the per-file limit: a 300 KB gzip bomb costs the limit, not 300 MB.
- ``typed_name``: only text and known document types are indexed. The content type decides (text/*,
  HTML, Markdown, PDF, ...), else the URL's file suffix; a body with neither (JSON from an API or a
  metadata service, say) is skipped with the reason.
- ``fetch_http``: conditional GETs (``If-None-Match`` / ``If-Modified-Since`` from the last sync); the
  revision is a digest of every URL's content hash (or ETag). The whole fetch runs under one deadline,
  so a server that trickles a byte a second cannot hold a worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import ssl
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import httpcore
import httpx

from ragengine_operator.sources.egress import EgressDenied, EgressPolicy, pin
from ragengine_operator.sources.fetched import Deadline, Fetched, FetchError, FetchLimits, extract

REDIRECTS = frozenset({301, 302, 303, 307, 308})
CHUNK = 64 * 1024
READ_TIMEOUT_S = 60.0  # per network operation; the fetch's deadline bounds the whole
ACCEPT_ENCODING = "gzip, deflate"
USER_AGENT = "ragengine-operator"
DOCUMENT_TYPES = {
    "text/html": ".html", "application/xhtml+xml": ".html", "text/markdown": ".md", "text/x-markdown": ".md",
    "text/x-rst": ".rst", "text/csv": ".csv", "application/pdf": ".pdf",
}


class TooLarge(Exception):
    pass


class _Stream(httpcore.NetworkStream):
    """A socket whose every read and write waits at most until the fetch's deadline: a server that
    trickles (headers or body) is cut at the deadline, not at some multiple of a read timeout."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self.inner, self.deadline = inner, deadline

    def _timeout(self, timeout: float | None) -> float:
        left = self.deadline.remaining()  # FetchError once passed
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
    """Connects to the address the egress policy checked, whatever the URL's host: the URL keeps the
    name, so Host, SNI and the certificate check are for the name."""

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
        raise FetchError("unix sockets are not fetched")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __iter__(self) -> Iterator[bytes]:
        yield from self.stream

    def close(self) -> None:
        self.stream.close()


class PinnedTransport(httpx.BaseTransport):
    """An httpx transport whose connections (kept and reused) all go to one checked address: for a client
    of one host (an S3 endpoint), pinned as ``pinned_get`` pins, under the fetch's deadline. Transport
    errors come out as httpcore's, as from ``pinned_get``."""

    def __init__(self, address: str, deadline: Deadline, max_connections: int = 4) -> None:
        self.pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), max_connections=max_connections,
                                            retries=0, network_backend=_PinnedBackend(address, deadline))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        raw = self.pool.handle_request(httpcore.Request(
            request.method, httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                                         port=request.url.port, target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions))
        return httpx.Response(raw.status, headers=raw.headers, stream=_Body(raw.stream), extensions=raw.extensions)

    def close(self) -> None:
        self.pool.close()


@dataclass
class Response:
    status_code: int
    headers: httpx.Headers
    chunks: Iterator[bytes]  # the raw (still encoded) body, as it arrives


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return url.scheme, url.raw_host, url.port


_TRANSPORT_ERRORS = (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
                     httpcore.ConnectionNotAvailable, ssl.SSLError, OSError)


@contextlib.contextmanager
def pinned_get(url: str, policy: EgressPolicy, deadline: Deadline, *, headers: dict[str, str] | None = None,
               token: str | None = None, max_redirects: int = 5, follow_redirects: bool = True,
               timeout: float = READ_TIMEOUT_S) -> Iterator[tuple[str, Response]]:
    """Stream ``GET url``: yields (the final URL, the response, body unread). Raises FetchError with the
    reason (refused by the egress policy, unreachable, too many redirects, past the deadline). With
    ``follow_redirects=False`` a redirect is the response."""
    try:
        first = current = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise FetchError(f"{url}: invalid URL ({exc})") from None
    for hop in range(max_redirects + 1):
        via = f" (redirected to {current})" if hop else ""
        if current.scheme not in ("http", "https"):
            raise FetchError(f"{url}: a redirect to {current.scheme}:// is not followed{via}")
        host = current.raw_host.decode("ascii")
        try:
            target = pin(host, current.port or (443 if current.scheme == "https" else 80), policy)
        except EgressDenied as exc:
            raise FetchError(f"{url}: refused by the egress policy: {exc}{via}") from None
        send = {**(headers or {}), "Accept-Encoding": ACCEPT_ENCODING, "User-Agent": USER_AGENT}
        if token and _origin(current) == _origin(first):
            send["Authorization"] = f"Bearer {token}"
        limit = min(timeout, deadline.remaining())
        try:
            with httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), max_connections=1, retries=0,
                                         network_backend=_PinnedBackend(str(target.address), deadline)) as pool, \
                    pool.stream("GET", str(current), headers=list(send.items()), extensions={"timeout": {
                        "connect": limit, "read": limit, "write": limit, "pool": limit}}) as raw:
                resp = Response(raw.status, httpx.Headers(raw.headers), raw.iter_stream())
                location = resp.headers.get("location")
                if follow_redirects and resp.status_code in REDIRECTS and location:
                    try:
                        current = current.join(location)
                    except httpx.InvalidURL as exc:
                        raise FetchError(f"{url}: redirect to an invalid URL ({exc}){via}") from None
                    continue
                yield str(current), resp
                return
        except httpcore.TimeoutException as exc:
            if deadline.at <= deadline.clock():
                raise deadline.error(f"GET {url}") from None
            raise FetchError(f"{url} unreachable (timed out: {exc or type(exc).__name__}){via}") from None
        except _TRANSPORT_ERRORS as exc:
            raise FetchError(f"{url} unreachable ({type(exc).__name__}: {exc}){via}") from None
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
            piece = self.z.decompress(data, room - len(out) + 1)
            out += piece
            if len(out) > room:
                raise TooLarge
            data = self.z.unconsumed_tail
        return bytes(out)


def read_body(resp: Response, limit: int, deadline: Deadline) -> bytes:
    """The decoded body, or TooLarge as soon as it passes ``limit`` bytes; FetchError for an encoding
    other than gzip / deflate, a broken stream or the deadline."""
    encodings = [e.strip().lower() for e in resp.headers.get("content-encoding", "").split(",")]
    encodings = [e for e in encodings if e and e != "identity"]
    if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "x-gzip", "deflate")):
        raise FetchError(f"unsupported Content-Encoding {', '.join(encodings)} (gzip or deflate only)")
    declared = resp.headers.get("content-length", "")
    if not encodings and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    inflate = _Inflate(encodings[0]) if encodings else None
    out = bytearray()
    try:
        for chunk in resp.chunks:
            deadline.remaining()
            out += inflate.feed(chunk, limit - len(out)) if inflate else chunk
            if len(out) > limit:
                raise TooLarge
    except zlib.error as exc:
        raise FetchError(f"broken {encodings[0]} body ({exc})") from None
    except httpcore.TimeoutException:
        raise deadline.error("reading the body") if deadline.at <= deadline.clock() else FetchError(
            "the server stopped sending the body (read timed out)") from None
    except _TRANSPORT_ERRORS as exc:
        raise FetchError(f"the body could not be read ({type(exc).__name__}: {exc})") from None
    return bytes(out)


def typed_name(url: str, content_type: str) -> str | None:
    """A name whose suffix tells the extractor the type: the content type's when it is a document type,
    the URL's own suffix for text/* (``.py`` served as text/plain stays code) or an untyped body; None
    when neither says it is a document."""
    media = content_type.split(";")[0].strip().lower()
    path = httpx.URL(url).path.rstrip("/") or "/index"
    suffix = PurePosixPath(path).suffix.lower()
    wanted = DOCUMENT_TYPES.get(media)
    if wanted:
        return path if suffix == wanted else path + wanted
    if media.startswith("text/"):
        return path if suffix else path + ".txt"
    if suffix:
        return path
    return None


def _refused_type(content_type: str) -> str:
    media = content_type.split(";")[0].strip() or "none"
    return (f"content type {media} is not text or a document type, and the URL has no file suffix "
            "(only text, HTML, Markdown, reStructuredText, CSV and PDF are indexed)")


def fetch_http(urls: list[str], previous: dict[str, dict], token: str | None = None, *,
               policy: EgressPolicy | None = None, limits: FetchLimits | None = None,
               last_revision: str | None = None) -> Fetched:
    """Fetch each URL (conditionally); a URL answering 304 keeps its last content hash in the revision."""
    policy, limits = policy or EgressPolicy(), limits or FetchLimits()
    deadline = Deadline(limits.deadline_s)
    out = Fetched("")
    all_unchanged = True
    total = 0
    for url in urls:
        seen = previous.get(url, {})
        cond = {}
        if seen.get("etag"):
            cond["If-None-Match"] = seen["etag"]
        if seen.get("last_modified"):
            cond["If-Modified-Since"] = seen["last_modified"]
        with pinned_get(url, policy, deadline, headers=cond, token=token,
                        max_redirects=limits.max_redirects) as (final, resp):
            if resp.status_code == 304:
                out.validators[url] = seen
                out.kept.append(url)
                continue
            if resp.status_code in (401, 403):
                raise FetchError(f"{url} refused the credentials (HTTP {resp.status_code})")
            if resp.status_code >= 300:
                raise FetchError(f"{url} answered HTTP {resp.status_code}")
            all_unchanged = False
            validators = {"etag": resp.headers.get("etag"), "last_modified": resp.headers.get("last-modified"),
                          "digest": None}
            out.validators[url] = validators
            ctype = resp.headers.get("content-type", "")
            typed = typed_name(final, ctype)
            if typed is None:
                out.skipped[url] = _refused_type(ctype)
                continue
            try:
                data = read_body(resp, limits.max_file_bytes, deadline)
            except TooLarge:
                out.skipped[url] = f"too large: more than {limits.max_file_bytes} bytes (the limit, counted decoded)"
                continue
        total += len(data)
        if total > limits.max_bytes:
            raise FetchError(f"the URLs hold more than {limits.max_bytes} bytes (the source's maxSize)")
        validators["digest"] = hashlib.sha256(data).hexdigest()
        extract(url, data, out, url=url, typed_as=typed, max_file_bytes=limits.max_file_bytes)
        del data
    tags = "".join(f"{u}={out.validators[u].get('digest') or out.validators[u].get('etag')}" for u in urls)
    out.revision = "sha256:" + hashlib.sha256(tags.encode()).hexdigest()[:16]
    out.unchanged = all_unchanged and out.revision == last_revision
    return out
