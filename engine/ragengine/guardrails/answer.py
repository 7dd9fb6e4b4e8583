"""The output policy on answers the engine writes out piece by piece itself: session messages and Responses.

``AnswerGuard``: the answer's text through the policy (``feed`` each piece, ``close`` at the end; ``shown`` is
what the client saw, and what is stored), and every other text the model wrote that goes out beside it
(``scrub``: a tool call's query and argument names, a reformulated question), through the pattern scanners
(``OutputGuard.redact``) before it is sent or stored (issue 41: tool-call events and the stored history
kept a redacted key). ``report`` is the answer's ``guardrails`` field, counting both.
"""

from __future__ import annotations

import time
from typing import Any

from ragengine.guardrails.fields import merge
from ragengine.guardrails.output import _failed, _record, report_attributes, unscreened
from ragengine.guardrails.runtime import Guardrails
from ragengine.guardrails.scan import Verdict
from ragengine.guardrails.stream import OutputStream
from ragengine.observability import tracing


def block_text(stream: OutputStream, message: str) -> str:
    """What a stream sends when it is blocked: the block message, after a blank line if text went out."""
    return ("\n\n" if stream.text else "") + message


class AnswerGuard:
    """One answer's text through the policy: ``feed`` each piece, ``close`` at the end; ``shown`` is what the
    client saw (and what is stored), ``report`` the answer's ``guardrails`` field."""

    def __init__(self, guardrails: Guardrails | None, endpoint: str = "sessions") -> None:
        self.guardrails, self.endpoint = guardrails, endpoint
        self.guard = guardrails.for_answer() if guardrails is not None and guardrails.enabled else None
        self.stream = OutputStream(self.guard) if self.guard is not None else None
        self.side = Verdict("")  # what ``scrub`` found in the texts beside the answer
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

    def scrub(self, value: Any) -> Any:
        """``value`` (a string, or lists and dicts of them, keys included) with every string through the pattern
        scanners: what goes out beside the answer. A string a block scanner matches becomes the block message."""
        if self.guard is None or self.stream is None:
            return value
        if isinstance(value, str):
            t0 = time.perf_counter()
            try:
                v = self.guard.redact(value)
            except Exception as exc:
                assert self.guardrails is not None
                self.report = _failed(self.guardrails, self.endpoint, exc)  # raises when fail-closed
                self.stream = None
                return value
            finally:
                self.spent += time.perf_counter() - t0
            merge(self.side, v)
            self.side.blocked = self.side.blocked or v.blocked
            return v.text
        if isinstance(value, dict):
            return {self.scrub(k) if isinstance(k, str) else k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.scrub(v) for v in value]
        return value

    def scrub_in_place(self, record: dict) -> None:
        """``scrub`` a record that is shared (a tool call's: its event, the reply's metadata, the history)."""
        scrubbed = self.scrub(record)
        if scrubbed is not record:
            record.clear()
            record.update(scrubbed)

    def close(self) -> str:
        if self.stream is None:  # no policy, or a scan failed (fail-open): the report says which
            span, self.span = self.span, None
            tracing.end(span, **report_attributes(self.report, self.spent))
            return ""
        out = self._out(lambda _: self.stream.close(), "")
        assert self.guard is not None
        if self.report is None:
            answer = merge(Verdict(""), self.stream.verdict) if self.stream is not None else Verdict("")
            self.report = _record(self.guard, [merge(answer, self.side)], self.endpoint, self.spent, "stream", None)
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
