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

from ragengine.guardrails.fields import ChoiceStreams, guard_choice, top_level
from ragengine.guardrails.metrics import ANSWERS, SCAN_SECONDS, SCANNER_ACTIONS
from ragengine.guardrails.runtime import Guardrails, GuardrailsUnavailable
from ragengine.guardrails.scan import OutputGuard, Verdict
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
        body = top_level(body)
        for choice in body.get("choices") or []:
            if isinstance(choice, dict):
                verdicts.append(guard_choice(guard, choice))
        body["choices"] = [c for c in body.get("choices") or [] if isinstance(c, dict)]
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
    streams: dict[int, ChoiceStreams] = {}
    head: dict[str, Any] = {"id": "", "model": "", "created": int(time.time())}
    spent = 0.0
    failed: dict[str, Any] | None = None
    report: dict[str, Any] | None = None
    span = tracing.opened("guardrails", mode="stream", endpoint=endpoint)  # the whole stream; scan_ms its own part

    def settle() -> list[dict]:
        ends = (_end(s, i, {}, {}) for i, s in sorted(streams.items()) if not s.ended)
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
            kept = top_level(data) if failed is None else data
            if choices or not data["choices"] or set(kept) - CHUNK_KEYS:  # usage and final chunks go as they are
                yield frame({**kept, "choices": choices})
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


def _guard_choice(guard: OutputGuard, streams: dict[int, ChoiceStreams], choice: Any) -> dict | None:
    if not isinstance(choice, dict):
        return None  # nothing the policy can read goes out
    i = choice.get("index", 0)
    state = streams.get(i)
    if state is None:
        state = streams[i] = ChoiceStreams(guard)
    if state.ended:
        return None  # blocked or cut: nothing more of this choice
    found = choice.get("delta")
    out = state.feed(found if isinstance(found, dict) else {})
    if state.stopped or choice.get("finish_reason"):
        return _end(state, i, choice, out)
    if not out:
        return None  # all of it held back (the choice's unknown keys, token_ids, are never sent)
    return _choice(i, choice, out, None)


def _choice(i: int, choice: dict, delta: dict, finish_reason: str | None) -> dict:
    out: dict[str, Any] = {"index": i, "delta": delta, "finish_reason": finish_reason}
    if "stop_reason" in choice:
        out["stop_reason"] = choice["stop_reason"]
    if "logprobs" in choice:
        out["logprobs"] = None  # tokens one by one: a secret split across them (fields.py)
    return out


def _end(state: ChoiceStreams, i: int, choice: dict, out: dict) -> dict:
    """A choice's last chunk: what was held, then the block message or the finish reason of a cut."""
    delta = state.close(out)
    v = state.verdict
    return _choice(i, choice, delta, v.finish_reason or choice.get("finish_reason"))


