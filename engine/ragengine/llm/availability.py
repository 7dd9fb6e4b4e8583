"""What the engine last saw of its LLM: whether it answers (and why not), and whether it takes tool calls.

Readiness never depends on it: without an LLM the engine still serves retrieval and extractive answers,
so a vLLM that restarts, downloads its model or is scaled to zero must not take the engine's endpoints
away. GET /ready (which asks the LLM, concurrently with its own checks) and every LLM call update it;
GET /health reads it without calling anything.

Tool calls: vLLM answers 400 to `tool_choice: "auto"` unless it was started with
`--enable-auto-tool-choice --tool-call-parser` ('"auto" tool choice requires --enable-auto-tool-choice and
--tool-call-parser to be set'). The first such refusal is logged once, as a warning that says why; tools
mode then answers through retrieval and the LLM without tools, and tool calls are tried again after
TOOLS_RECHECK_S (vLLM may have been restarted with a parser). Logged again only once they work again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

TOOLS_RECHECK_S = 300.0
# The words of vLLM's refusal (vllm/renderers/online_renderer.py, 0.10 to 0.33).
_TOOL_REFUSALS = ("--tool-call-parser", "--enable-auto-tool-choice")


def tool_calls_refused(status_code: int, message: str) -> bool:
    """Whether an upstream error is an OpenAI-compatible server refusing tool calls for want of a parser."""
    return status_code == 400 and any(words in message for words in _TOOL_REFUSALS)


def _stamp(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class LLMAvailability:
    configured: bool
    available: bool | None = None  # None: nothing has talked to it yet
    reason: str | None = None  # why it is not available
    checked_at: float | None = None  # wall clock of the last answer or failure
    tool_calls: bool | None = None  # False: refused; True: a tool round worked; None: not tried yet
    tools_reason: str | None = None  # why tool calls are refused
    _tools_refused_at: float | None = field(default=None, repr=False)
    _tools_logged: bool = field(default=False, repr=False)

    def ok(self) -> None:
        self.available, self.reason, self.checked_at = True, None, time.time()

    def down(self, reason: str) -> None:
        self.available, self.reason, self.checked_at = False, reason, time.time()

    # --- tool calls ---------------------------------------------------------------------------------
    def tools_refused(self) -> str | None:
        """Why tool calls are known not to work now; None when they may (untried, working, recheck due)."""
        if self._tools_refused_at is None or time.monotonic() - self._tools_refused_at > TOOLS_RECHECK_S:
            return None
        return self.tools_reason

    def refuse_tools(self, message: str) -> str:
        """Record a refusal; the first one is logged (once per process, until tool calls work again)."""
        self.tools_reason = (f"the LLM refuses tool calls: {message} (start vLLM with --enable-auto-tool-choice "
                             "--tool-call-parser <parser>, the operator's inference.toolCallParser)")
        self._tools_refused_at, self.tool_calls = time.monotonic(), False
        if not self._tools_logged:
            self._tools_logged = True
            log.warning("tool calls are unavailable, tools mode answers with retrieval instead: %s", self.tools_reason)
        return self.tools_reason

    def tools_work(self) -> None:
        if self.tool_calls is False:
            log.info("tool calls work again")
        self._tools_refused_at, self.tools_reason, self._tools_logged, self.tool_calls = None, None, False, True

    def to_dict(self, *, reasons: bool = True) -> dict[str, Any]:
        """For /health and /ready; ``reasons=False`` leaves out the words (they name internal URLs)."""
        out: dict[str, Any] = {"configured": self.configured, "available": self.available,
                               "checked_at": _stamp(self.checked_at), "tool_calls": self.tool_calls}
        if reasons:
            out["reason"] = self.reason
            out["tool_calls_reason"] = self.tools_reason
        return out
