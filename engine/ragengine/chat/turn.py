"""What a chat request carries through the service (``Turn``) and what the service returns (``JSONOutcome``,
``StreamOutcome``): values only, no I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ragengine.chat.plan import Target
from ragengine.protocol.openai import ChatCompletionRequest, RagInfo


@dataclass
class JSONOutcome:
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    candidates: list  # retrieved nodes at or above the similarity threshold
    nodes: list  # those that fit the context budget, in the order they go into the prompt
    context_tokens: int


@dataclass
class StreamOutcome:
    events: AsyncIterator[str]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Turn:
    """One chat request on its way through the service: what was asked, where it goes (index, upstream
    model, context ratio, ACL), when it arrived, the stages' times (``Server-Timing``) and what the engine
    did (``rag``, the ``X-RAG-Outcome`` reason). Passed whole instead of a parameter for each."""

    req: ChatCompletionRequest
    target: Target
    t0: float  # when the request was received: every answer mode's time to first token starts here
    info: RagInfo = field(default_factory=lambda: RagInfo(applied=False))
    outcome: str | None = None  # the bypass or no-context reason; None: RAG applied
    timing: dict[str, float] = field(default_factory=dict)
