"""The output policy on the engine's answers: chat completions (a JSON body, or the SSE frames) and
session answers (their text pieces). The chat service and the session service each call in here once.

Every answer that went through a policy says so in a ``guardrails`` field: the action (allow, redact,
block), each scanner that acted (type, action, count) and the policy's sha256 prefix; never the text
that was removed. A blocked choice's content is the policy's ``blockMessage`` with ``finish_reason``
``content_filter``; one cut by ``token_limit``/``reading_time`` ends with ``finish_reason`` ``length``.
In a stream, a block ends that choice there: what was released before the match stays (it cannot be
taken back, and it holds no part of the match), then the block message and the finish reason. When every
choice has ended so, the upstream response is closed and the stream ends with the ``guardrails`` chunk
and ``[DONE]``. Each block is one structured log line (``guardrails_block``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from ragengine.guardrails.metrics import ANSWERS, SCAN_SECONDS, SCANNER_ACTIONS
from ragengine.guardrails.runtime import Guardrails, GuardrailsUnavailable
from ragengine.guardrails.scan import OutputGuard, Verdict
from ragengine.guardrails.stream import OutputStream
from ragengine.observability import tracing
from ragengine.protocol.sse import DONE, error_object, frame

log = logging.getLogger("ragengine.guardrails")
FAILED = "Output guardrails failed while scanning the model response."


def _record(guard: OutputGuard, verdicts: list[Verdict], endpoint: str, seconds: float, mode: str,
            answer_id: str | None) -> dict[str, Any]:
    SCAN_SECONDS.labels(endpoint, mode).observe(seconds)
    for v in verdicts:
        ANSWERS.labels(endpoint, v.action).inc()
        for i, n in v.hits.items():
            SCANNER_ACTIONS.labels(guard.policy.scanners[i].type, guard.action_of(i), endpoint).inc(n)
    report = guard.report(verdicts)
    for choice, v in enumerate(verdicts):
        if v.blocked:
            log.warning("%s", json.dumps({
                "event": "guardrails_block", "endpoint": endpoint, "id": answer_id, "choice": choice,
                "scanners": guard.report([v])["scanners"], "policy": guard.policy.digest}))
    return report


def report_attributes(report: dict[str, Any] | None, seconds: float | None = None) -> dict[str, Any]:
    """A ``guardrails`` field as span attributes: the action, each scanner that acted (type:action:count),
    the policy's digest, the scan time."""
    report = report or {}
    return {"guardrails.action": report.get("action"), "guardrails.policy": report.get("policy"),
            "guardrails.scanners": [f"{x['type']}:{x['action']}:{x['count']}" for x in report.get("scanners") or []]
            or None, "guardrails.scan_ms": None if seconds is None else round(seconds * 1000, 3)}


def _failed(guardrails: Guardrails, endpoint: str, exc: Exception) -> dict[str, Any]:
    ANSWERS.labels(endpoint, "error").inc()
    log.exception("guardrails scan failed on %s (fail_%s): %s", endpoint, "open" if guardrails.fail_open else "closed",
                  exc)
    if not guardrails.fail_open:
        raise GuardrailsUnavailable(FAILED) from exc
    return {"action": "error", "error": FAILED}


def unscreened(guardrails: Guardrails, endpoint: str) -> dict[str, Any] | None:
    """The ``guardrails`` field when fail-open left an answer unscreened (no usable policy); None when the
    policy simply has nothing to scan, or none is configured."""
    if guardrails.enabled and guardrails.current() is None:
        ANSWERS.labels(endpoint, "unavailable").inc()
        return {"action": "unscreened", "error": guardrails.last_error}
    return None


# --- chat completions ---------------------------------------------------------------------------------
def guard_chat(guardrails: Guardrails | None, outcome: Any, n: int = 1, endpoint: str = "chat_completions") -> Any:
    """A ``JSONOutcome`` (``.body``) or ``StreamOutcome`` (``.events``, ``n`` choices) through the policy in force."""
    if guardrails is None or not guardrails.enabled:
        return outcome
    guard = guardrails.for_answer()  # fail-closed without a policy: 503 before anything is sent
    if hasattr(outcome, "body"):
        if guard is None:
            if (note := unscreened(guardrails, endpoint)) is not None:
                outcome.body["guardrails"] = note
            return outcome
        with tracing.stage("guardrails", mode="json", endpoint=endpoint) as span:
            outcome.body = _guard_body(guardrails, guard, outcome.body, endpoint)
            tracing.annotate(span, **report_attributes(outcome.body.get("guardrails")))
        return outcome
    if guard is not None:
        outcome.events = _guard_frames(guardrails, guard, outcome.events, endpoint, n)
    return outcome


def _guard_body(guardrails: Guardrails, guard: OutputGuard, body: dict, endpoint: str) -> dict:
    t0 = time.perf_counter()
    verdicts: list[Verdict] = []
    try:
        for choice in body.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict) or not isinstance(message.get("content"), str):
                continue  # tool calls without text (KAITO skips them too)
            v = guard.check(message["content"])
            message["content"] = v.text
            if v.finish_reason:
                choice["finish_reason"] = v.finish_reason
            verdicts.append(v)
    except Exception as exc:
        body["guardrails"] = _failed(guardrails, endpoint, exc)
        return body
    body["guardrails"] = _record(guard, verdicts, endpoint, time.perf_counter() - t0, "json", body.get("id"))
    return body


def _parse(text: str) -> Any:
    if not text.startswith("data: "):
        return None
    payload = text[6:].strip()
    if payload == "[DONE]":
        return payload
    try:
        return json.loads(payload)
    except ValueError:
        return None


async def _guard_frames(guardrails: Guardrails, guard: OutputGuard, frames: AsyncIterator[str],
                        endpoint: str, n: int) -> AsyncIterator[str]:
    streams: dict[int, OutputStream] = {}
    head: dict[str, Any] = {"id": "", "model": "", "created": int(time.time())}
    spent = 0.0
    failed: dict[str, Any] | None = None
    report: dict[str, Any] | None = None
    span = tracing.opened("guardrails", mode="stream", endpoint=endpoint)  # the whole stream; scan_ms its own part

    def settle() -> list[dict]:
        ends = (_end(guard, s, {"index": i, "delta": {}, "finish_reason": None}, "")
                for i, s in sorted(streams.items()) if not s.ended)
        return [c for c in ends if c["delta"] or c["finish_reason"]]

    try:
        async for text in frames:
            data = _parse(text)
            if data == "[DONE]":
                break
            if failed is not None:  # fail-open after a scan error: the rest goes as it comes
                yield text
                continue
            if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                t0 = time.perf_counter()
                tail = settle()  # an error event (or anything else): what is held is settled first
                spent += time.perf_counter() - t0
                if tail:
                    yield frame(_chunk(head, tail))
                yield text
                continue
            head.update({k: data[k] for k in ("id", "model", "created") if data.get(k)})
            t0 = time.perf_counter()
            try:
                choices = [c for c in (_guard_choice(guard, streams, ch) for ch in data["choices"]) if c is not None]
            except Exception as exc:
                failed = _failed(guardrails, endpoint, exc)  # raises when fail-closed
                choices = data["choices"]
            spent += time.perf_counter() - t0
            if choices or not data["choices"] or set(data) - CHUNK_KEYS:  # usage and final chunks go as they are
                yield frame({**data, "choices": choices})
            if len(streams) >= n and all(s.stopped for s in streams.values()):
                break  # every choice blocked or cut: stop reading the LLM
        if failed is None:
            t0 = time.perf_counter()
            tail = settle()
            spent += time.perf_counter() - t0
            if tail:
                yield frame(_chunk(head, tail))
        report = failed or _record(guard, [s.verdict for _, s in sorted(streams.items())], endpoint, spent, "stream",
                                   head["id"] or None)
        yield frame(_chunk(head, [], guardrails=report))
    except GuardrailsUnavailable as exc:
        report = {"action": "error", "error": exc.message}
        yield frame({"error": error_object(exc)})
    finally:
        tracing.end(span, **report_attributes(report, spent))
        aclose = getattr(frames, "aclose", None)
        if aclose is not None:
            await aclose()  # the relay's own clean-up closes the upstream response
    yield DONE


CHUNK_KEYS = frozenset({"id", "object", "created", "model", "choices", "system_fingerprint", "service_tier"})


def _chunk(head: dict, choices: list, **extra: Any) -> dict:
    return {"id": head["id"], "object": "chat.completion.chunk", "created": head["created"], "model": head["model"],
            "choices": choices, **extra}


def _guard_choice(guard: OutputGuard, streams: dict[int, OutputStream], choice: Any) -> dict | None:
    if not isinstance(choice, dict):
        return choice
    i = choice.get("index", 0)
    stream = streams.get(i)
    if stream is None:
        stream = streams[i] = guard.stream()
    if stream.ended:
        return None  # blocked or cut: nothing more of this choice
    delta = dict(choice.get("delta") or {})
    content = delta.get("content")
    released = stream.feed(content) if isinstance(content, str) else ""
    if stream.stopped or choice.get("finish_reason"):
        return _end(guard, stream, {**choice, "delta": delta}, released)
    if isinstance(content, str):
        delta["content"] = released
        if content and not released:
            del delta["content"]  # held back: the rest of the delta (role, tool calls) still goes
    if not delta and set(choice) <= {"index", "delta", "finish_reason", "logprobs"}:
        return None
    return {**choice, "delta": delta}


def _end(guard: OutputGuard, stream: OutputStream, choice: dict, released: str) -> dict:
    """A choice's last chunk: what was held, then the block message or the finish reason of a cut."""
    text = released + ("" if stream.stopped else stream.close())
    v = stream.verdict
    if v.blocked:
        text += block_text(stream, guard.policy.block_message)
    delta = dict(choice.get("delta") or {})
    if text:
        delta["content"] = text
    else:
        delta.pop("content", None)
    return {**choice, "delta": delta, "finish_reason": v.finish_reason or choice.get("finish_reason")}


def block_text(stream: OutputStream, message: str) -> str:
    """What a stream sends when it is blocked: the block message, after a blank line if text went out."""
    return ("\n\n" if stream.text else "") + message


# --- session answers ------------------------------------------------------------------------------------
class AnswerGuard:
    """One session answer's text through the policy: ``feed`` each piece, ``close`` at the end; ``shown``
    is what the client saw (and what is stored), ``report`` the answer's ``guardrails`` field."""

    def __init__(self, guardrails: Guardrails | None, endpoint: str = "sessions") -> None:
        self.guardrails, self.endpoint = guardrails, endpoint
        self.guard = guardrails.for_answer() if guardrails is not None and guardrails.enabled else None
        self.stream = self.guard.stream() if self.guard is not None else None
        self.shown = ""
        self.spent = 0.0
        self.report: dict[str, Any] | None = None if self.guard else (
            unscreened(guardrails, endpoint) if guardrails is not None else None)
        self._block_sent = False
        self.span = tracing.opened("guardrails", mode="stream", endpoint=endpoint) if self.guard else None

    @property
    def stopped(self) -> bool:
        return self.stream is not None and self.stream.stopped

    @property
    def blocked(self) -> bool:
        return self.stream is not None and self.stream.verdict.blocked

    def feed(self, piece: str) -> str:
        if self.stream is None:
            self.shown += piece
            return piece
        return self._out(self.stream.feed, piece)

    def close(self) -> str:
        if self.stream is None:  # no policy, or a scan failed (fail-open): the report says which
            span, self.span = self.span, None
            tracing.end(span, **report_attributes(self.report, self.spent))
            return ""
        out = self._out(lambda _: self.stream.close(), "")
        assert self.guard is not None
        if self.report is None:
            self.report = _record(self.guard, [self.stream.verdict], self.endpoint, self.spent, "stream", None)
        span, self.span = self.span, None
        tracing.end(span, **report_attributes(self.report, self.spent))
        return out

    def _out(self, step, piece: str) -> str:
        assert self.stream is not None and self.guard is not None
        t0 = time.perf_counter()
        try:
            out = step(piece)
        except Exception as exc:
            assert self.guardrails is not None
            self.report = _failed(self.guardrails, self.endpoint, exc)
            self.stream = None
            out = piece
        self.spent += time.perf_counter() - t0
        if self.stream is not None and self.stream.verdict.blocked and not self._block_sent:
            self._block_sent = True
            out += block_text(self.stream, self.guard.policy.block_message)
        self.shown += out
        return out
