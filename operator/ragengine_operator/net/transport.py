"""net/http.py's bounds as an httpx transport: ``httpx.Client(transport=BoundedTransport(...))``.

For code that speaks httpx (the sync worker's engine client, whose calls httpx's OpenTelemetry
instrumentation traces): each request runs under ONE deadline of ``timeout_s`` (resolving, connecting,
sending and the whole answer; httpx's own timeouts are per socket operation, so a server that trickles a
byte a second would never trip them), and its body is decoded here and cut at ``max_bytes`` (httpx never
sees a Content-Encoding, so its own decoder cannot expand a bomb). One connection per request, pinned to the
address resolved (checked by ``policy`` when given). A client of many calls that share one budget (a source's
reads of a bucket: its listing pages and objects) passes that ``deadline`` too: each call ends at whichever
comes first. A request may lower the cap for itself: ``extensions={MAX_BYTES: n}`` (a listing page, an
object at the per-file limit). Auth flows that sign the request (httpx-auth's SigV4) run before it reaches
the transport, so they work unchanged; the transport sets only ``Accept-Encoding`` and ``User-Agent``,
which no signer signs. Failures are httpx's exceptions:

- ``httpx.ConnectError``: the connection was never made (nothing sent: a caller may repeat the request);
  ``EgressRefused`` (one of them) when the egress policy refused the host, which was not contacted;
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
MAX_BYTES = "ragengine.max_bytes"  # a request's own cap (its extensions), below the transport's


class DeadlineExceeded(httpx.TimeoutException):
    """The request's one deadline passed."""


class ResponseTooLarge(httpx.RequestError):
    """The response's body passed the transport's byte cap (or the request's own)."""


class EgressRefused(httpx.ConnectError):
    """The egress policy refused the request's host: nothing was sent."""


def _httpx_error(exc: FetchError | TooLarge, request: httpx.Request) -> httpx.HTTPError:
    if isinstance(exc, TooLarge):
        return ResponseTooLarge(f"{request.method} {request.url}: {exc}", request=request)
    if isinstance(exc, DeadlinePassed):
        return DeadlineExceeded(str(exc), request=request)
    if isinstance(exc, Refused):
        return EgressRefused(str(exc), request=request)
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
    def __init__(self, timeout_s: float, max_bytes: int, policy: EgressPolicy | None = None,
                 deadline: Deadline | None = None) -> None:
        self.timeout_s, self.max_bytes, self.policy, self.deadline = timeout_s, max_bytes, policy, deadline

    def _deadline(self) -> Deadline:
        """The request's own deadline, or the shared one where that comes first."""
        own = Deadline(self.timeout_s, label="the request's deadline")
        return self.deadline if self.deadline is not None and self.deadline.at < own.at else own

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = self._deadline()
        cap = min(self.max_bytes, int(request.extensions.get(MAX_BYTES, self.max_bytes)))
        what = f"{request.method} {request.url}"
        stack = contextlib.ExitStack()
        try:
            deadline.remaining()  # a shared deadline already passed: nothing is sent
            resp = stack.enter_context(exchange(
                request.method, request.url, deadline, policy=self.policy, headers=request.headers.multi_items(),
                content=request.read(), timeout=self.timeout_s, what=what))
            chunks = iter_body(resp, cap, deadline, what)
            headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _DROPPED]
        except (FetchError, TooLarge) as exc:
            stack.close()
            raise _httpx_error(exc, request) from None
        except BaseException:
            stack.close()
            raise
        return httpx.Response(resp.status_code, headers=headers, stream=_Body(chunks, stack, request),
                              request=request)
