"""OpenAI-compatible LLM client with a fallback chain.

Endpoints are ``settings.llm_url`` then each of ``settings.llm_fallback_urls``. A connection error is
retried ``llm_retries`` times on the same endpoint (nothing was sent, so it is safe); a 5xx or a
timeout moves on to the next endpoint; an endpoint that failed is tried last for ``COOLDOWN_S``, so a
dead primary does not cost every request a connect attempt. An upstream
4xx (401 bad key, 429 rate limit, 400 context overflow ...) also moves on along the chain. When every
endpoint failed: ``LLMUnavailable``, with the upstream status and message when they all refused with
a 4xx, else 502 (504 when the last one timed out); callers answering RAG requests fall back to the
extractive answer on it.

Streams fail over only before the first byte: once a chunk has been forwarded, a failure is the
stream's to report.

Every completion's tokens are charged to the request's principal (``access.usage``, for tokens-per-minute
limits): reserved before the call is sent (the prompt, estimated, plus ``n × max_tokens``; ``max_tokens``
lowered to what the principal has left), then settled to the upstream's ``usage`` when it reports one, else
an estimate of the prompt and the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragengine import __version__
from ragengine.access import usage
from ragengine.errors import UpstreamError
from ragengine.llm import http
from ragengine.llm.availability import LLMAvailability
from ragengine.llm.tokens import TokenCounter, estimate_tokens, message_text
from ragengine.metrics import LLM_FALLBACKS, LLM_REQUESTS
from ragengine.observability import tracing
from ragengine.redact import redact_text, redact_url
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    import aiohttp  # imported at the first call (llm/http.py)

log = logging.getLogger(__name__)

COOLDOWN_S = 10.0
# Used when neither settings nor the server say how long the context window is (llama.cpp's server
# does not report n_ctx); small on purpose: a too-small window only shrinks the context budget.
DEFAULT_CONTEXT_WINDOW = 2048


class LLMUnavailable(UpstreamError):
    """No configured LLM endpoint answered (connection errors, 5xx, timeouts)."""


@dataclass
class LLMResult:
    body: dict[str, Any]
    endpoint: str  # the base URL that answered, credentials masked (shown in responses and logs)
    elapsed_s: float


def call_attributes(payload: dict[str, Any], stream: bool) -> dict[str, Any]:
    """An LLM call's span attributes before it is sent (GenAI semantic conventions where they have one)."""
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": payload.get("model"),
            "gen_ai.request.max_tokens": payload.get("max_tokens") or payload.get("max_completion_tokens"),
            "llm.stream": stream, "llm.messages": len(payload.get("messages") or ()),
            "llm.tools": len(payload.get("tools") or ()) or None}


def usage_attributes(body: Any) -> dict[str, Any]:
    """Token counts and the model from a completion (or a stream's usage chunk), when it reports them."""
    body = body if isinstance(body, dict) else {}
    use = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    return {"gen_ai.response.model": body.get("model") or None, "gen_ai.usage.input_tokens": use.get("prompt_tokens"),
            "gen_ai.usage.output_tokens": use.get("completion_tokens")}


class LLMStream:
    """An open upstream SSE response: iterate for parsed chunk dicts; ``aclose()`` cancels upstream."""

    def __init__(self, response: aiohttp.ClientResponse, endpoint: str, started: float, prompt_tokens: int = 0,
                 span: Any = None, hold: usage.Hold | None = None) -> None:
        self.response = response
        self.endpoint = endpoint
        self.started = started
        self.first_chunk_s: float | None = None
        self.prompt_tokens = prompt_tokens  # estimated, for the charge when upstream reports no usage
        self.span = span  # the call's llm_call span, ended with the stream
        self.hold = hold  # the tokens reserved for the call (access.usage), settled once when it ends
        self._read = False
        self._usage: dict[str, Any] = {}

    def _settle(self, spent: int) -> None:
        hold, self.hold = self.hold, None
        usage.settle(hold, spent)

    def _end(self, error: BaseException | None = None) -> None:
        span, self.span = self.span, None
        tracing.end(span, error, **self._usage, **{"llm.first_chunk_ms": None if self.first_chunk_s is None
                                                   else round(self.first_chunk_s * 1000, 2)})

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        self._read = True  # the iteration settles the hold, with what was said
        reported, said = None, 0
        failure: BaseException | None = None
        try:
            async for line in http.lines(self.response):
                if not line.startswith("data:"):
                    continue  # blank separators, comments, "event:" lines
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise UpstreamError(f"LLM at {self.endpoint} sent a malformed stream event: {data[:200]!r}") from None
                if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
                    status, message = _error_of(chunk, 502)
                    raise UpstreamError(f"LLM stream failed: {message}", status_code=status)
                if self.first_chunk_s is None:
                    self.first_chunk_s = time.perf_counter() - self.started
                reported = _total_tokens(chunk) or reported
                if chunk.get("usage"):
                    self._usage = usage_attributes(chunk)
                said += sum(estimate_tokens((c.get("delta") or {}).get("content") or "")
                            for c in chunk.get("choices") or [] if isinstance(c, dict))
                yield chunk
        except http.TimedOut:
            failure = LLMUnavailable(f"LLM at {self.endpoint} stopped sending (read timeout).", status_code=504)
            raise failure from None
        except http.TransportFailed as exc:
            failure = LLMUnavailable(f"LLM stream from {self.endpoint} broke: {redact_text(repr(exc))}")
            raise failure from exc
        except Exception as exc:
            failure = exc
            raise
        finally:
            self._settle(reported or self.prompt_tokens + said)
            self._end(failure)
            http.close(self.response)

    async def aclose(self) -> None:
        if not self._read:  # closed before it was read: the prompt was processed all the same
            self._settle(self.prompt_tokens)
        self._end()
        http.close(self.response)


def _cause(exc: BaseException) -> str:
    """The wire error's own class name (``ClientConnectorError``, ``ConnectionTimeoutError``) for messages."""
    cause = exc.__cause__
    return type(cause).__name__ if cause is not None else type(exc).__name__


def _total_tokens(body: Any) -> int | None:
    """``usage.total_tokens`` of a completion or chunk, when the server reports it."""
    total = ((body.get("usage") or {}) if isinstance(body, dict) else {}).get("total_tokens")
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None


def _prompt_estimate(payload: dict[str, Any]) -> int:
    messages = payload.get("messages")
    return sum(estimate_tokens(message_text(m)) for m in messages if isinstance(m, dict)) if isinstance(messages, list) else 0


MESSAGE_OVERHEAD = 4  # a chat template's role markers per message, and its generation prompt once


def _reserved_prompt(payload: dict[str, Any]) -> int:
    """The prompt a reservation counts: the messages' text, the chat template's markers, the tools' schemas."""
    messages = payload.get("messages")
    tools = payload.get("tools")
    return (_prompt_estimate(payload) + MESSAGE_OVERHEAD * ((len(messages) if isinstance(messages, list) else 0) + 1)
            + (estimate_tokens(json.dumps(tools)) if tools else 0))


def _error_of(body: Any, status: int) -> tuple[int, str]:
    """Status and message from the error shapes of OpenAI, vLLM, llama.cpp and FastAPI."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            message = err.get("message") or err.get("detail") or json.dumps(err)[:500]
            code = err.get("code")
            if isinstance(code, int) and 400 <= code < 600 and status == 502:
                status = code
            return status, str(message)
        if isinstance(err, str):
            return status, err
    return status, str(body)[:500]


async def _message_of(response: aiohttp.ClientResponse) -> str:
    """An error answer's message; the body is read, so the connection goes back to the pool."""
    text = await http.read_text(response, 100_000)
    try:
        return _error_of(json.loads(text), response.status)[1]
    except ValueError:
        return text[:500] or response.reason or str(response.status)


class LLMClient:
    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        # Base URLs ending in /v1; a KAITO-style full ".../v1/chat/completions" URL is accepted too.
        self.endpoints: list[str] = [u.rstrip("/").removesuffix("/chat/completions")
                                     for u in [settings.llm_url, *settings.llm_fallback_urls] if u]
        self.configured = bool(self.endpoints)
        self.availability = LLMAvailability(configured=self.configured)
        headers = {"User-Agent": f"ragengine/{__version__}"}
        if settings.llm_api_key:
            headers["Authorization"] = f"Bearer {settings.llm_api_key}"
        self._http = http.LLMHttp(headers, settings.llm_timeout_s, settings.llm_connect_timeout_s)
        self._down_until: dict[str, float] = {}
        self._models: dict[str, list[dict[str, Any]]] = {}
        self._discovery_retry_at = 0.0
        self._model_name: str | None = settings.llm_model
        self._window: int | None = settings.context_window
        roots = [u[:-3] if u.endswith("/v1") else u for u in self.endpoints]
        self.tokens = TokenCounter(self._http, roots, self.model_name, settings.llm_tokenizer)

    @property
    def http(self) -> http.LLMHttp:
        """The client of every call to the LLM (completions, discovery, token counts)."""
        return self._http

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- discovery --------------------------------------------------------------------------------
    async def list_models(self) -> list[dict[str, Any]]:
        """``/v1/models`` of the first endpoint that answers (cached once it did; after all failed, not
        asked again for ``COOLDOWN_S`` so an unreachable LLM does not slow every request)."""
        for endpoint in self._ordered():
            if endpoint in self._models:
                return self._models[endpoint]
        if time.monotonic() < self._discovery_retry_at:
            return []
        for endpoint in self._ordered():
            try:
                resp = await self._http.send("GET", f"{endpoint}/models", timeout_s=self.settings.llm_connect_timeout_s + 5)
                if resp.status >= 400:
                    raise http.TransportFailed(f"HTTP {resp.status}: {await _message_of(resp)}")
                data = (await http.read_json(resp)).get("data") or []
            except (http.TransportFailed, ValueError, AttributeError) as exc:
                log.warning("model discovery at %s failed: %s", redact_url(endpoint), redact_text(str(exc)))
                continue
            self._models[endpoint] = [m for m in data if isinstance(m, dict) and m.get("id")]
            return self._models[endpoint]
        self._discovery_retry_at = time.monotonic() + COOLDOWN_S
        return []

    async def model_name(self) -> str | None:
        if self._model_name is None:
            models = await self.list_models()
            if models:
                self._model_name = str(models[0]["id"])
        return self._model_name

    async def context_window(self) -> int:
        if self._window is None:
            name = await self.model_name()
            for model in await self.list_models():
                if model.get("max_model_len") and (name is None or model["id"] == name):
                    self._window = int(model["max_model_len"])
                    break
            else:
                if self.configured and not self._models:
                    return DEFAULT_CONTEXT_WINDOW  # server not reachable yet: ask again next time
                log.warning("context window unknown (set RAGENGINE_CONTEXT_WINDOW); assuming %d", DEFAULT_CONTEXT_WINDOW)
                self._window = DEFAULT_CONTEXT_WINDOW
        return self._window

    async def count_tokens(self, text_or_messages: str | list[dict[str, Any]]) -> int:
        return await self.tokens.count(text_or_messages)

    async def count_tokens_many(self, texts: list[str]) -> list[int]:
        return await self.tokens.count_many(texts)

    async def count_chunk_tokens(self, texts: list[str], stored: list[dict[str, int] | None]) -> list[int]:
        """Chunk counts: the ones stored with the chunks for the current tokenizer, the others counted."""
        return await self.tokens.count_with_stored(texts, stored)

    # --- completions ------------------------------------------------------------------------------
    async def _reserve(self, payload: dict[str, Any]) -> tuple[dict[str, Any], usage.Hold | None]:
        """The call's tokens reserved for the request's principal (access.usage): the payload to send (its
        ``max_tokens`` lowered to what is left) and the hold to settle. 429 when nothing is left."""
        if not self.configured or not usage.metered():
            return payload, None
        return await usage.reserve(payload, _reserved_prompt(payload), await self.context_window())

    async def chat(self, payload: dict[str, Any]) -> LLMResult:
        payload, hold = await self._reserve(payload)
        spent = 0  # a call that failed spent nothing the upstream reports: the reservation is given back
        try:
            with tracing.stage("llm_call", **call_attributes(payload, stream=False)) as span:
                response, endpoint, started = await self._send(payload, stream=False)
                try:
                    body = await http.read_json(response)  # read by _send already: no I/O here
                except ValueError:
                    raise UpstreamError(f"LLM at {endpoint} answered with invalid JSON.") from None
                tracing.annotate(span, **usage_attributes(body))
            answer = sum(estimate_tokens(message_text(c.get("message") or {}))
                         for c in (body.get("choices") or []) if isinstance(c, dict)) if isinstance(body, dict) else 0
            spent = _total_tokens(body) or _prompt_estimate(payload) + answer
            return LLMResult(body=body, endpoint=endpoint, elapsed_s=time.perf_counter() - started)
        finally:
            usage.settle(hold, spent)

    async def open_stream(self, payload: dict[str, Any]) -> LLMStream:
        """Send a streaming request; returns once upstream answered 200 (errors before that raise). The
        call's span stays open until the stream ends or is closed."""
        payload, hold = await self._reserve(payload)
        span = tracing.opened("llm_call", **call_attributes(payload, stream=True))
        try:
            with tracing.use(span):
                response, endpoint, started = await self._send({**payload, "stream": True}, stream=True)
        except BaseException as exc:
            tracing.end(span, exc)
            usage.settle(hold, 0)
            raise
        return LLMStream(response, endpoint, started, _prompt_estimate(payload), span, hold)

    def _ordered(self) -> list[str]:
        now = time.monotonic()
        healthy = [e for e in self.endpoints if self._down_until.get(e, 0) <= now]
        return healthy + [e for e in self.endpoints if e not in healthy]

    async def _send(self, payload: dict[str, Any], *, stream: bool) -> tuple[aiohttp.ClientResponse, str, float]:
        if not self.configured:
            raise LLMUnavailable("No LLM is configured (set RAGENGINE_LLM_URL).", status_code=503)
        failures: list[str] = []
        rejected: tuple[int, str] | None = None  # the last 4xx, when every endpoint refused the request
        timed_out = False
        attempts = 0
        for endpoint in self._ordered():
            shown = redact_url(endpoint)  # what messages, logs and results name: no credentials
            for attempt in range(self.settings.llm_retries + 1):
                started = time.perf_counter()
                attempts += 1
                try:
                    response = await self._http.send("POST", f"{endpoint}/chat/completions", body=payload)
                    if not stream and response.status < 400:
                        await http.read_body(response)  # an answer that breaks off moves on along the chain too
                except http.ConnectFailed as exc:
                    LLM_REQUESTS.labels(shown, "connect_error").inc()
                    failure, timed_out = f"{shown}: cannot connect ({_cause(exc)})", False
                    if attempt < self.settings.llm_retries:
                        await asyncio.sleep(0.05 * 2**attempt)
                        continue
                except http.TimedOut as exc:
                    LLM_REQUESTS.labels(shown, "timeout").inc()
                    failure, timed_out = f"{shown}: timed out ({_cause(exc)})", True
                except http.TransportFailed as exc:
                    LLM_REQUESTS.labels(shown, "error").inc()
                    failure, timed_out = f"{shown}: {redact_text(str(exc))}", False
                else:
                    LLM_REQUESTS.labels(shown, f"{response.status // 100}xx").inc()
                    if response.status < 400:
                        self._down_until.pop(endpoint, None)
                        self.availability.ok()
                        if failures:  # an endpoint further down the chain answered
                            LLM_FALLBACKS.labels("next_endpoint").inc()
                        tracing.annotate(**{"llm.endpoint": shown, "llm.attempts": attempts,
                                            "llm.fallback": bool(failures), "llm.failures": len(failures) or None})
                        return response, shown, started
                    try:
                        message = await _message_of(response)
                    except http.TransportFailed as exc:  # the error's body broke off: its status still says it
                        message = redact_text(str(exc))
                    failure = f"{shown}: HTTP {response.status}: {message}"
                    timed_out = response.status == 504
                    if response.status < 500:
                        # A 4xx moves on along the chain too (another endpoint may hold a valid key, have
                        # quota left or a longer window); only a refusal about the endpoint itself
                        # (401, 403, 429) puts it last for a while, a 400 is about this request.
                        rejected = (response.status, message)
                        failures.append(failure)
                        if response.status in (401, 403, 429):
                            self._down_until[endpoint] = time.monotonic() + COOLDOWN_S
                        log.warning("LLM endpoint refused the request: %s", failure)
                        break
                failures.append(failure)
                self._down_until[endpoint] = time.monotonic() + COOLDOWN_S
                log.warning("LLM endpoint failed: %s", failure)
                break
        tracing.annotate(**{"llm.attempts": attempts, "llm.failures": len(failures)})
        if rejected is not None and all(": HTTP 4" in f for f in failures):
            # Every endpoint refused: the caller gets the upstream status, and its own words when one
            # endpoint is configured (OpenAI clients map 400/401/429 to their exception classes).
            status, message = rejected
            if status in (401, 403):  # it answers, but not to us: unusable all the same
                self.availability.down(f"The LLM refused the engine's key (HTTP {status}): {message}")
            raise LLMUnavailable(message if len(failures) == 1 else "; ".join(failures), status_code=status)
        reason = "The LLM is unavailable: " + "; ".join(failures)
        self.availability.down(reason)
        raise LLMUnavailable(reason, status_code=504 if timed_out else 502)
