"""The engine's HTTP client to its LLM endpoints: completions, streams, model discovery and token counts.

One aiohttp session, opened on first use in the running event loop (a session belongs to its loop), with the
endpoints' headers and time-outs: ``timeout_s`` for waiting on a free connection and between reads,
``connect_timeout_s`` for the TCP connection itself.

Why aiohttp when the rest of the engine uses httpx: the LLM call is on every chat turn, and a loopback
completion cost 0.84-1.07 ms of the engine's CPU through httpx, 0.51-0.66 ms through httpx over an aiohttp
transport and 0.25-0.32 ms through aiohttp (docs/performance.md, "What was removed from the turn"). aiohttp
comes with the engine anyway: llama-index-core depends on it.

Failures on the wire are raised as three classes the fallback chain tells apart:

- ``ConnectFailed``: no connection was made (refused, unresolvable), so nothing was sent and a retry is safe;
- ``TimedOut``: the connection or a read took too long;
- ``TransportFailed`` (their base): anything else, such as a connection dropped mid-answer.

An HTTP error status is not a failure here: the caller reads the status. With tracing on (``tracing``), each
request is a CLIENT span, child of the current span, whose W3C ``traceparent`` goes in the request's headers:
vLLM's own spans join the request's trace.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ragengine.observability import tracing as spans
from ragengine.redact import redact_url

if TYPE_CHECKING:
    import aiohttp


class TransportFailed(Exception):
    """The request failed on the wire: no HTTP status to report."""


class ConnectFailed(TransportFailed):
    """No connection could be made: nothing was sent."""


class TimedOut(TransportFailed):
    """Connecting, or waiting for the next bytes of the answer, took longer than allowed."""


@contextmanager
def mapped() -> Iterator[None]:
    """aiohttp's errors as the three classes above (their message keeps aiohttp's class name and words)."""
    try:
        yield
    except Exception as exc:
        import aiohttp  # imported already: a session exists (LLMHttp._open)

        message = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):  # connecting or reading
            raise TimedOut(message) from exc
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise ConnectFailed(message) from exc
        if isinstance(exc, aiohttp.ClientError):
            raise TransportFailed(message) from exc
        raise


class LLMHttp:
    """The session to the LLM's endpoints, with their headers (the engine's User-Agent, the API key)."""

    def __init__(self, headers: dict[str, str], timeout_s: float, connect_timeout_s: float) -> None:
        self._headers = headers
        self._timeouts = (timeout_s, connect_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxies: dict[str, dict[str, Any]] = {}  # origin -> its proxy from the environment, if any
        self.tracing: spans.Tracing | None = None  # set when the engine traces (api/chat.py)

    def _open(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # Imported here, at the first call: 0.3 s of import that the engine's start-up does not pay.
            import aiohttp

            timeout_s, connect_s = self._timeouts
            timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_connect=connect_s, sock_read=timeout_s)
            # A session made in another loop (a test's earlier loop) cannot be closed from this one: dropped.
            # trust_env off: aiohttp then looks the proxy up, and .netrc, in a thread on every request (two
            # thread hops per call). The environment's proxy is looked up once per origin instead (_proxy).
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=timeout, trust_env=False,
                                                  connector=aiohttp.TCPConnector(limit=256))
            self._loop = loop
        return self._session

    async def send(self, method: str, url: str, *, body: Any = None,
                   timeout_s: float | None = None) -> aiohttp.ClientResponse:
        """The response once its status and headers have arrived; read it with ``read_json``/``lines`` or
        ``close`` it. ``body``: sent as JSON. ``timeout_s``: a limit on the whole call instead of the
        session's. Raises ``TransportFailed``."""
        session = self._open()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        data = json.dumps(body).encode() if body is not None else None
        extra = self._proxy(url)
        if timeout_s is not None:
            import aiohttp

            extra["timeout"] = aiohttp.ClientTimeout(total=timeout_s)
        with _client_span(self.tracing, method, url, headers) as span:
            with mapped():
                response = await session.request(method, url, data=data, headers=headers, **extra)
            spans.annotate(span, **{"http.response.status_code": response.status})
            return response

    def _proxy(self, url: str) -> dict[str, Any]:
        """The proxy HTTP_PROXY/HTTPS_PROXY name for ``url``'s origin, unless NO_PROXY exempts it (as httpx
        read them), as ``request`` arguments."""
        scheme, netloc, *_ = urlsplit(url)
        origin = f"{scheme}://{netloc}"
        found = self._proxies.get(origin)
        if found is None:
            from aiohttp.helpers import get_env_proxy_for_url
            from yarl import URL

            try:
                proxy, proxy_auth = get_env_proxy_for_url(URL(origin))
                found = {"proxy": proxy, "proxy_auth": proxy_auth}
            except LookupError:
                found = {}
            self._proxies[origin] = found
        return dict(found)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed and self._loop is asyncio.get_running_loop():
            await session.close()


async def read_body(response: aiohttp.ClientResponse) -> bytes:
    """The whole body (kept by the response: read again, it costs nothing), the connection then back in the pool."""
    with mapped():
        return await response.read()


async def read_json(response: aiohttp.ClientResponse) -> Any:
    """The whole body as JSON (ValueError when it is not), the connection then back in the pool."""
    return json.loads(await read_body(response))


async def read_text(response: aiohttp.ClientResponse, limit: int = 500) -> str:
    """The start of the body as text (an error's message), the connection then back in the pool."""
    return (await read_body(response))[:limit * 4].decode("utf-8", "replace")[:limit]


async def lines(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """The body's lines as they arrive, without their end (LF or CRLF), split as bytes before decoding so a
    character cut between two reads stays whole. No limit on a line's length, unlike aiohttp's readline."""
    pending = b""
    with mapped():
        async for chunk in response.content.iter_any():
            pending += chunk
            if b"\n" not in chunk:
                continue
            *done, pending = pending.split(b"\n")
            for line in done:
                yield line.removesuffix(b"\r").decode("utf-8", "replace")
    if pending:
        yield pending.removesuffix(b"\r").decode("utf-8", "replace")


def close(response: aiohttp.ClientResponse) -> None:
    """Done with ``response``: its connection goes back to the pool when the body was read to the end, else it
    is closed, which tells the upstream to stop (vLLM aborts the request's generation)."""
    if response.content.at_eof():
        response.release()
    else:
        response.close()


@contextmanager
def _client_span(tracing: spans.Tracing | None, method: str, url: str, headers: dict[str, str]) -> Iterator[Any]:
    """A CLIENT span for the request, its context injected into ``headers``; nothing when tracing is off."""
    if tracing is None or tracing.tracer is None:
        yield None
        return
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    shown = redact_url(url)
    with tracing.tracer.start_as_current_span(method, kind=SpanKind.CLIENT, attributes={
            "http.request.method": method, "url.full": shown}) as span:
        propagate.inject(headers)
        yield span
