"""net/http.py's bounds as an httpx transport: ``httpx.Client(transport=BoundedTransport(...))``.

For code that speaks httpx (the sync worker's engine client, whose calls httpx's OpenTelemetry
instrumentation traces): each request runs under ONE deadline of ``timeout_s`` (resolving, connecting,
sending and the whole answer; httpx's own timeouts are per socket operation, so a server that trickles a
byte a second would never trip them), and its body is decoded here and cut at ``max_bytes`` (httpx never
sees a Content-Encoding, so its own decoder cannot expand a bomb). One connection per request, pinned to the
address resolved (checked by ``policy`` when given). Failures are httpx's exceptions:

- ``httpx.ConnectError``: the connection was never made (nothing sent: a caller may repeat the request);
- ``DeadlineExceeded`` (an ``httpx.TimeoutException``): the deadline passed;
- ``ResponseTooLarge``: the body passed ``max_bytes``;
- ``httpx.ReadError``: any other broken exchange.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx

from .egress import EgressPolicy
from .http import Deadline, DeadlinePassed, FetchError, Refused, TooLarge, Unreachable, exchange, iter_body

# Not passed on: the body reaches httpx decoded, so its length and encoding headers no longer describe it.
_DROPPED = ("content-encoding", "content-length", "transfer-encoding")


class DeadlineExceeded(httpx.TimeoutException):
    """The request's one deadline passed."""


class ResponseTooLarge(httpx.RequestError):
    """The response's body passed the transport's byte cap."""


def _httpx_error(exc: FetchError | TooLarge, request: httpx.Request) -> httpx.HTTPError:
    if isinstance(exc, TooLarge):
        return ResponseTooLarge(f"{request.method} {request.url}: {exc}", request=request)
    if isinstance(exc, DeadlinePassed):
        return DeadlineExceeded(str(exc), request=request)
    if isinstance(exc, Unreachable | Refused):
        return httpx.ConnectError(str(exc), request=request)
    return httpx.ReadError(str(exc), request=request)


class _Body(httpx.SyncByteStream):
    def __init__(self, chunks: Iterator[bytes], stack: contextlib.ExitStack, request: httpx.Request) -> None:
        self.chunks, self.stack, self.request = chunks, stack, request

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.chunks
        except (FetchError, TooLarge) as exc:
            raise _httpx_error(exc, self.request) from None

    def close(self) -> None:
        self.stack.close()


class BoundedTransport(httpx.BaseTransport):
    def __init__(self, timeout_s: float, max_bytes: int, policy: EgressPolicy | None = None) -> None:
        self.timeout_s, self.max_bytes, self.policy = timeout_s, max_bytes, policy

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = Deadline(self.timeout_s, label="the request's deadline")
        what = f"{request.method} {request.url}"
        stack = contextlib.ExitStack()
        try:
            resp = stack.enter_context(exchange(
                request.method, request.url, deadline, policy=self.policy, headers=request.headers.multi_items(),
                content=request.read(), timeout=self.timeout_s, what=what))
            chunks = iter_body(resp, self.max_bytes, deadline, what)
            headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _DROPPED]
        except (FetchError, TooLarge) as exc:
            stack.close()
            raise _httpx_error(exc, request) from None
        except BaseException:
            stack.close()
            raise
        return httpx.Response(resp.status_code, headers=headers, stream=_Body(chunks, stack, request),
                              request=request)
