"""Where model text is in a chat completion, and what the output policy does with each field. Pure.

The answer is not only ``content`` (issue 41: a redacted key still left through the others):

- ``content`` (a message's, or a stream delta's): the whole policy (``OutputGuard.check`` / ``stream``);
- ``reasoning_content`` and ``reasoning`` (vLLM's reasoning parsers), ``refusal``, each tool call's ``name`` and
  ``arguments`` (and the legacy ``function_call``'s): the pattern scanners (``OutputGuard.redact``: secrets,
  PII, banned substrings, regex search), each a text of its own, streamed with the same hold-back; a block
  in any of them blocks the choice. The whole-answer scanners and the limits judge ``content`` alone;
- ``logprobs``: each token, and its alternatives, one by one (a secret is split across them, and a redacted
  one is still in the alternatives): sent as ``null``;
- anything else a choice, a message or a delta carries that the engine does not know (vLLM's ``token_ids``,
  a newer server's field) is dropped, and so is a top-level key that is neither OpenAI's nor the engine's
  own (``prompt_token_ids``, ``prompt_logprobs``, ``kv_transfer_params``): a field the policy cannot read
  never passes it.
"""

from __future__ import annotations

from typing import Any

from ragengine.guardrails.scan import OutputGuard, Verdict
from ragengine.guardrails.stream import OutputStream

SIDE_TEXT = ("reasoning_content", "reasoning", "refusal")  # scanned as texts of their own
MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "function_call", *SIDE_TEXT})
CHOICE_KEYS = frozenset({"index", "message", "delta", "finish_reason", "stop_reason", "logprobs"})
CALL_KEYS = ("index", "id", "type")
TOP_KEYS = frozenset({"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier",
                      "source_nodes", "rag", "generation_method", "fallback_reason", "guardrails", "error"})


def merge(into: Verdict, other: Verdict) -> Verdict:
    into.hits.update(other.hits)
    into.blocked = into.blocked or other.blocked
    into.finish_reason = "content_filter" if into.blocked else into.finish_reason or other.finish_reason
    return into


def top_level(body: dict) -> dict:
    """An answer's (or a chunk's) top-level keys the policy lets through."""
    return {k: v for k, v in body.items() if k in TOP_KEYS}


# --- a whole answer ---------------------------------------------------------------------------------------
def _call(guard: OutputGuard, call: Any, verdict: Verdict) -> dict | None:
    if not isinstance(call, dict):
        return None
    out = {k: call[k] for k in CALL_KEYS if k in call}
    fn = call.get("function") if "function" in call else call  # a tool call's function, or function_call itself
    if isinstance(fn, dict):
        scanned = {k: _redacted(guard, fn[k], verdict) for k in ("name", "arguments") if isinstance(fn.get(k), str)}
        if "function" in call:
            out["function"] = scanned
        else:
            out.update(scanned)
    return out


def _redacted(guard: OutputGuard, text: str, verdict: Verdict) -> str:
    v = guard.redact(text)
    merge(verdict, v)
    return v.text


def guard_choice(guard: OutputGuard, choice: dict) -> Verdict:
    """One choice of a whole answer through the policy, in place; its verdict (what the report counts)."""
    found = choice.get("message")
    message: dict[str, Any] = found if isinstance(found, dict) else {}
    content = message.get("content")
    verdict = guard.check(content) if isinstance(content, str) else Verdict("")
    if isinstance(content, str):
        message["content"] = verdict.text
    for key in SIDE_TEXT:
        if isinstance(message.get(key), str):
            message[key] = _redacted(guard, message[key], verdict)
    if isinstance(message.get("tool_calls"), list):
        message["tool_calls"] = [c for c in (_call(guard, c, verdict) for c in message["tool_calls"]) if c is not None]
    if "function_call" in message:
        message["function_call"] = _call(guard, message["function_call"], verdict)
    for key in set(choice) - CHOICE_KEYS:
        del choice[key]
    for key in set(message) - MESSAGE_KEYS:
        del message[key]
    if "logprobs" in choice:
        choice["logprobs"] = None
    if verdict.blocked:
        choice["message"] = {"role": "assistant", "content": guard.policy.block_message}
    if verdict.finish_reason:
        choice["finish_reason"] = verdict.finish_reason
    return verdict


# --- a stream ---------------------------------------------------------------------------------------------
class ChoiceStreams:
    """One choice's text fields, each through its own ``OutputStream``: ``content`` with the whole policy, the
    side texts (by field name, or ``("tool", index)`` for a tool call's arguments) with the pattern scanners."""

    def __init__(self, guard: OutputGuard) -> None:
        self.g = guard
        self.content = OutputStream(guard)
        self.side: dict[Any, OutputStream] = {}
        self.whole = Verdict("")  # texts that come whole (a tool's name), redacted at once

    def stream(self, key: Any) -> OutputStream:
        if key not in self.side:
            self.side[key] = OutputStream(self.g, patterns_only=True)
        return self.side[key]

    @property
    def blocked(self) -> bool:
        return self.whole.blocked or self.content.verdict.blocked or any(s.verdict.blocked for s in self.side.values())

    @property
    def stopped(self) -> bool:
        return self.blocked or self.content.stopped

    @property
    def ended(self) -> bool:
        return self.stopped or self.content.closed

    @property
    def verdict(self) -> Verdict:
        out = merge(Verdict(self.content.text), self.content.verdict)
        for s in self.side.values():
            merge(out, s.verdict)
        return merge(out, self.whole)

    def feed(self, delta: dict) -> dict:
        """What of a delta may go out now (its known fields only)."""
        out: dict[str, Any] = {}
        if isinstance(delta.get("role"), str):
            out["role"] = delta["role"]
        content = delta.get("content")
        if isinstance(content, str):
            released = self.content.feed(content)
            if released or not content:
                out["content"] = released
        for key in SIDE_TEXT:
            if isinstance(delta.get(key), str) and (released := self.stream(key).feed(delta[key])):
                out[key] = released
        calls = [c for c in (self._call(c) for c in delta.get("tool_calls") or []) if c]
        if calls:
            out["tool_calls"] = calls
        if isinstance(delta.get("function_call"), dict):  # the legacy single call
            legacy = self._function(delta["function_call"], ("function_call",))
            if legacy:
                out["function_call"] = legacy
        return out

    def _call(self, call: Any) -> dict | None:
        if not isinstance(call, dict):
            return None
        out = {k: call[k] for k in CALL_KEYS if k in call}
        fn = call.get("function")
        scanned = self._function(fn, ("tool", call.get("index", 0))) if isinstance(fn, dict) else {}
        if scanned:
            out["function"] = scanned
        return out if scanned or len(out) > 1 else None

    def _function(self, fn: dict, key: tuple) -> dict[str, str]:
        """A function's name (it comes whole: redacted at once) and its arguments' piece (streamed)."""
        scanned: dict[str, str] = {}
        if isinstance(fn.get("name"), str):
            v = self.g.redact(fn["name"])
            merge(self.whole, v)
            scanned["name"] = v.text
        if isinstance(fn.get("arguments"), str):
            released = self.stream(key).feed(fn["arguments"])
            if released or not fn["arguments"]:
                scanned["arguments"] = released
        return scanned

    def close(self, out: dict) -> dict:
        """The last delta of the choice: ``out`` (what this chunk released) with everything still held."""
        if self.blocked:
            shown = out.get("content") or ""
            return {"content": shown + ("\n\n" if self.content.text or shown else "") + self.g.policy.block_message}
        rest = "" if self.content.stopped else self.content.close()
        if rest or "content" in out:
            out["content"] = (out.get("content") or "") + rest
        for key, stream in self.side.items():
            tail = stream.close()
            if not tail:
                continue
            if key == ("function_call",):
                legacy = out.setdefault("function_call", {})
                legacy["arguments"] = legacy.get("arguments", "") + tail
            elif isinstance(key, tuple):
                calls = out.setdefault("tool_calls", [])
                entry = next((c for c in calls if c.get("index", 0) == key[1]), None)
                if entry is None:
                    calls.append({"index": key[1], "function": {"arguments": tail}})
                else:
                    fn = entry.setdefault("function", {})
                    fn["arguments"] = fn.get("arguments", "") + tail
            else:
                out[key] = out.get(key, "") + tail
        if self.blocked:  # closing found a block in what was held
            return self.close({})
        return out
