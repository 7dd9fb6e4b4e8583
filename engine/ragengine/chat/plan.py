"""Chat request → plan, following the seed's algorithm (``shared/seeds/chat-completion-algorithm.md``).

Pure: no I/O, no clock. The service counts tokens and retrieves; these functions decide.

Order (the seed's): resolve the target index and parameters → bypass rules → message validation and
split → token validation and budget. Deliberate choices where the seed is silent or KAITO differs:

- ``tools``/``functions`` bypass RAG (the seed; KAITO answers 400).
- ``n > 1`` is passed to the LLM (vLLM generates the choices; they share one retrieved context). With
  the extractive fallback every choice carries the same answer. ``n`` outside 1..128 is a 400.
- A prompt that fills the window exactly is rejected like a longer one: no token would be left to
  generate (the seed rejects only ``>``, which would send ``max_tokens = 0``).
- The context budget is the seed's ``min(max_tokens or window, window - query - 150) * ratio``, then
  capped at what is free beside the whole conversation (``window - prompt - 150``): the seed counts
  only the query, so a long history could otherwise overflow the window. With short histories the cap
  never binds and the numbers are the seed's. ``max_tokens`` sent upstream is lowered again, after the
  context is chosen, so prompt + context + reply always fit.
- Context is filled in score order (the seed sorts before its greedy fill; the index's fused hybrid rank
  is only the candidate list); the threshold is on ``score``, a similarity in [0, 1] (KAITO compared L2
  distances, see its defect #5).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ragengine.access.acl import Acl
from ragengine.errors import BadRequest
from ragengine.llm.tokens import message_text
from ragengine.protocol.openai import MODEL_ALIAS_PREFIX, ChatCompletionRequest, requested_index
from ragengine.settings import CONTEXT_TOKEN_RATIO_MAX, CONTEXT_TOKEN_RATIO_MIN

log = logging.getLogger(__name__)

SUPPORTED_ROLES = frozenset({"user", "system", "assistant", "developer"})
ADDITION_PROMPT_TOKENS = 150  # the seed's reserve for prompt formatting
MIN_TOP_K = 100
NO_USER_PROMPT = "There must be a user prompt since the latest assistant message."
PROMPT_TOO_LONG = "Prompt length exceeds context window."
# llama-index ContextChatEngine's own template (``DEFAULT_CONTEXT_TEMPLATE``; the context goes into the
# system message), copied so that chat does not import llama-index (seconds of start-up); a test keeps it equal.
CONTEXT_TEMPLATE = (
    "Use the context information below to assist the user.\n"
    "--------------------\n"
    "{context_str}\n"
    "--------------------\n"
)


@dataclass(frozen=True)
class Target:
    index_name: str | None
    model: str | None  # sent upstream; None = the served model
    ratio: float
    acl: Acl | None = None  # the caller's document ACL (access control); None: every document


@dataclass(frozen=True)
class MessageSplit:
    user_prompt: str
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class TokenBudget:
    window: int
    prompt_tokens: int
    query_tokens: int
    max_tokens: int | None  # after fitting the window
    max_tokens_requested: int | None
    top_k: int
    context_budget: int


def resolve_target(req: ChatCompletionRequest, default_ratio: float) -> Target:
    """Index (from ``index_name`` or a ``rag:<index>`` model alias), upstream model and context ratio."""
    index_name, model = requested_index(req.index_name, req.model), req.model
    if model and model.startswith(MODEL_ALIAS_PREFIX):
        if not model[len(MODEL_ALIAS_PREFIX):]:
            raise BadRequest("Model alias 'rag:' needs an index name, e.g. 'rag:docs'.", param="model")
        model = None
    if index_name is not None and not index_name.strip():
        raise BadRequest("index_name must not be empty.", param="index_name")
    ratio = req.context_token_ratio
    if ratio is None:
        ratio = default_ratio
    elif not CONTEXT_TOKEN_RATIO_MIN <= ratio <= CONTEXT_TOKEN_RATIO_MAX:
        raise BadRequest(
            f"Invalid context_token_ratio: {ratio}. Must be between {CONTEXT_TOKEN_RATIO_MIN} and "
            f"{CONTEXT_TOKEN_RATIO_MAX}.",
            param="context_token_ratio",
        )
    return Target(index_name=index_name, model=model, ratio=ratio)


def bypass_reason(req: ChatCompletionRequest, index_name: str | None) -> str | None:
    """Why the request goes to the LLM as is, or None for RAG. Validates messages on the way (KAITO's order)."""
    if not index_name:
        return "no_index_name"
    if req.tools or req.functions:
        return "tools_or_functions"
    for message in req.messages:
        if not isinstance(message, dict) or "role" not in message:
            raise BadRequest("Invalid request format: messages must contain 'role'.", param="messages")
        role = message["role"]
        if role != "assistant" and message.get("content") is None:
            raise BadRequest(f"Invalid request format: messages must contain 'content' for role '{role}'.", param="messages")
        if role not in SUPPORTED_ROLES:
            return f"unsupported_role:{role}"
        if role == "user":
            content = message["content"]
            if isinstance(content, list):
                if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
                    return "non_text_content"
            elif not isinstance(content, str):
                raise BadRequest("Invalid request format: user content must be a string or a list of parts.", param="messages")
            if not message_text(message).strip():
                raise BadRequest("Invalid request format: user message content must not be empty.", param="messages")
    return None


def split_messages(messages: list[dict[str, Any]]) -> MessageSplit:
    """The seed's walk: user messages after the last assistant one form the query; all else is history."""
    prompt_parts: list[str] = []
    history: list[dict[str, Any]] = []
    assistant_found = False
    for message in reversed(messages):
        if message["role"] == "user" and not assistant_found:
            prompt_parts.insert(0, message_text(message))
        else:
            if message["role"] == "assistant":
                assistant_found = True
            history.insert(0, message)
    user_prompt = "\n\n".join(prompt_parts)
    if not user_prompt.strip():
        raise BadRequest(NO_USER_PROMPT, param="messages")
    return MessageSplit(user_prompt=user_prompt, history=history)


def plan_budget(
    *,
    window: int,
    prompt_tokens: int,
    query_tokens: int,
    max_tokens: int | None,
    ratio: float,
    node_token_approximation: int,
) -> TokenBudget:
    if prompt_tokens >= window:
        raise BadRequest(PROMPT_TOO_LONG, param="messages")
    requested = max_tokens
    free = window - prompt_tokens
    if max_tokens and max_tokens > free:
        log.warning(
            "max_tokens (%d) is greater than available context after prompt consideration. Setting to %d.",
            max_tokens, free,
        )
        max_tokens = free
    top_k = max(MIN_TOP_K, int(free / node_token_approximation))
    available = window - query_tokens - ADDITION_PROMPT_TOKENS
    available = min(max_tokens or window, available)
    budget = int(available * ratio)
    budget = max(0, min(budget, free - ADDITION_PROMPT_TOKENS))
    return TokenBudget(window, prompt_tokens, query_tokens, max_tokens, requested, top_k, budget)


def reply_max_tokens(budget: TokenBudget, context_tokens: int) -> int | None:
    """max_tokens to send once the context is chosen: what the caller asked, within what is left."""
    if budget.max_tokens is None:
        return None
    room = budget.window - budget.prompt_tokens - ADDITION_PROMPT_TOKENS - context_tokens
    return max(1, min(budget.max_tokens, room))


def build_messages(history: list[dict[str, Any]], user_prompt: str, context_texts: list[str]) -> list[dict[str, Any]]:
    """llama-index ContextChatEngine's layout: one system message holding the context template followed
    by the caller's leading system prompt, then the rest of the history as sent, then the query."""
    system_prompt, role, rest = "", "system", history
    if history and history[0].get("role") in ("system", "developer") and isinstance(history[0].get("content"), str):
        system_prompt, role, rest = history[0]["content"], history[0]["role"], history[1:]
    context = CONTEXT_TEMPLATE.format(context_str="\n\n".join(context_texts))
    return [
        {"role": role, "content": context + system_prompt.strip()},
        *rest,
        {"role": "user", "content": user_prompt},
    ]
