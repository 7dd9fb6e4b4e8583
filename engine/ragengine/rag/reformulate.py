"""Query reformulation: rewrite a follow-up ("which of those is quickest?") into a standalone question.

Seed: query-reformulation.md. Differences from the seed, on purpose:

- The history goes to the LLM as one transcript inside a single user message, not as replayed chat
  turns: replayed turns invite the model to continue the conversation (answer) instead of rewriting.
- Only the last ``settings.reformulate_history`` messages are sent, and each is cut to
  ``MAX_MESSAGE_CHARS``, so one pasted document in the history cannot blow the token budget.
- No LLM call when there is no history (nothing to resolve), and fail-open: without an LLM, or when
  every endpoint fails, or when the output is unusable (empty, an answer instead of a question,
  runaway length), the user's message is used unchanged and ``reason`` says why. Reformulation must
  never be the reason a chat fails.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragengine.errors import UpstreamError
from ragengine.metrics import REFORMULATE_SECONDS, REFORMULATIONS
from ragengine.observability import tracing
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.llm.client import LLMClient

log = logging.getLogger(__name__)

DEFAULT_REFORMULATE_PROMPT = """You are a query rewriting assistant.

Your task:
- Rewrite the user's latest question into a single, standalone question
- The user's latest question might reference context in the conversation history
- The rewritten question must be understandable without conversation history
- Do NOT answer the question
- Do NOT add new information
- If it's not needed to rewrite the question, return it as is
- Return only the rewritten question as plain text"""

MAX_MESSAGE_CHARS = 2000
MAX_OUTPUT_TOKENS = 128
_PREFIX = re.compile(r"^\s*(?:rewritten|standalone|reformulated)?\s*(?:question|query)\s*:\s*", re.IGNORECASE)


@dataclass
class ReformulationResult:
    """``query`` is what retrieval should use; ``original`` what the user typed."""

    query: str
    original: str
    reformulated: bool
    reason: str | None = None
    endpoint: str | None = None
    latency_ms: float = 0.0
    history_used: int = 0
    usage: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"query": self.query, "original": self.original, "reformulated": self.reformulated,
                "reason": self.reason, "endpoint": self.endpoint, "latency_ms": round(self.latency_ms, 2),
                "history_used": self.history_used}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def normalise_history(history: Iterable[Any]) -> list[dict[str, str]]:
    """user/assistant turns as ``{"role", "content"}``; accepts dicts with ``content`` or the seed's ``message``."""
    out = []
    for item in history:
        if hasattr(item, "model_dump"):
            item = item.model_dump()
        elif not isinstance(item, dict):
            item = {"role": getattr(item, "role", ""), "content": getattr(item, "content", "")}
        role = item.get("role")
        if role not in ("user", "assistant"):
            continue  # system prompts and tool traffic are not conversation
        text = _text(item.get("content") if item.get("content") is not None else item.get("message")).strip()
        if text:
            out.append({"role": role, "content": text})
    return out


def build_reformulation_messages(system_prompt: str, history: list[dict[str, str]], user_message: str,
                                 last_n: int) -> list[dict[str, str]]:
    """Pure: the two messages sent to the LLM (system prompt + transcript with the latest question)."""
    lines = []
    for turn in history[-last_n:]:
        text = turn["content"]
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[:MAX_MESSAGE_CHARS] + " …"
        lines.append(f"{turn['role'].capitalize()}: {text}")
    prompt = ("Conversation history:\n" + "\n".join(lines) + f"\n\nLatest question: {user_message.strip()}\n\n"
              "Standalone question:")
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": prompt}]


def clean_output(raw: str, original: str) -> str | None:
    """The rewritten question from the model's text, or None when it is not usable."""
    text = raw.strip()
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()  # reasoning models
    if not text:
        return None
    text = text.splitlines()[0].strip()
    text = _PREFIX.sub("", text).strip().strip('"').strip("'").strip("“”").strip()
    if not text:
        return None
    if len(text) > max(400, 6 * len(original)):
        return None  # a runaway answer, not a question
    return text


def outcome_of(result: ReformulationResult) -> str:
    """The metric label of a result: rewritten, unchanged (the LLM kept it), failed or skipped (no call)."""
    if result.reformulated:
        return "rewritten"
    if result.reason and result.reason.startswith("LLM failed"):
        return "failed"
    return "unchanged" if result.endpoint else "skipped"


async def reformulate_query(llm: LLMClient, settings: EngineSettings, user_message: str, history: Iterable[Any], *,
                            system_prompt: str | None = None, last_n: int | None = None) -> ReformulationResult:
    """Rewrite ``user_message`` given ``history``; never raises for LLM trouble (falls back to the message).

    ``llm`` is the engine's ``LLMClient`` (``configured``, ``chat(payload) -> LLMResult``, ``model_name()``).
    Every call is counted in ``ragengine_reformulations_total`` (and timed when the LLM was asked), whichever
    endpoint (chat completions, sessions, /v1/chat/reformulate) asked for it.
    """
    with tracing.stage("reformulation") as span:
        result = await _reformulate(llm, settings, user_message, history, system_prompt=system_prompt, last_n=last_n)
        tracing.annotate(span, outcome=outcome_of(result), history_used=result.history_used, reason=result.reason)
        tracing.content(span, "reformulation.query", result.query if result.reformulated else None)
    REFORMULATIONS.labels(outcome_of(result)).inc()
    if result.endpoint:
        REFORMULATE_SECONDS.observe(result.latency_ms / 1000)
    return result


async def _reformulate(llm: LLMClient, settings: EngineSettings, user_message: str, history: Iterable[Any], *,
                       system_prompt: str | None, last_n: int | None) -> ReformulationResult:
    original = user_message
    turns = normalise_history(history)
    n = last_n or settings.reformulate_history
    if not turns:
        return ReformulationResult(original, original, False, "no history")
    if not getattr(llm, "configured", False):
        return ReformulationResult(original, original, False, "no LLM configured; message used unchanged")
    prompt = system_prompt or getattr(settings, "reformulate_prompt", None) or DEFAULT_REFORMULATE_PROMPT
    messages = build_reformulation_messages(prompt, turns, user_message, n)
    payload: dict[str, Any] = {"messages": messages, "temperature": 0, "max_tokens": MAX_OUTPUT_TOKENS}
    model = await llm.model_name()
    if model:
        payload["model"] = model
    started = time.perf_counter()
    try:
        result = await llm.chat(payload)
    except UpstreamError as exc:
        log.warning("reformulation failed, using the message as is: %s", exc.message)
        return ReformulationResult(original, original, False, f"LLM failed: {exc.message}",
                                   latency_ms=(time.perf_counter() - started) * 1000, history_used=min(n, len(turns)))
    elapsed = (time.perf_counter() - started) * 1000
    try:
        raw = _text(result.body["choices"][0]["message"].get("content"))
    except (KeyError, IndexError, TypeError, AttributeError):
        raw = ""
    cleaned = clean_output(raw, original)
    used = min(n, len(turns))
    if cleaned is None:
        return ReformulationResult(original, original, False, "unusable LLM output; message used unchanged",
                                   result.endpoint, elapsed, used)
    return ReformulationResult(cleaned, original, cleaned != original.strip(), None, result.endpoint, elapsed, used,
                               dict(result.body.get("usage") or {}))
