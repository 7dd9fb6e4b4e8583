"""One session message on its way through ``ConversationService``'s steps: the ``Turn`` each step
reads and fills in, and the ``Generation`` the answering steps produce."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragengine.access.acl import Acl
from ragengine.conversations.budget import Budget
from ragengine.conversations.prompting import InlineDoc
from ragengine.conversations.tools import Scope
from ragengine.errors import UpstreamError
from ragengine.guardrails.answer import AnswerGuard
from ragengine.protocol.conversations import MAIN_THREAD, MessageRequest


@dataclass
class Turn:
    """One message on its way through the steps; each step reads what the earlier ones set."""

    session_id: str
    req: MessageRequest
    started: float
    acl: Acl | None = None  # the caller's document ACL (access control)
    files_of: str | None = None  # attachable files: this principal's (None: any, for admins)
    session: Any = None
    user: Any = None  # the stored user message
    history: list[dict] = field(default_factory=list)
    thread_id: str = MAIN_THREAD
    query: str = ""  # what retrieval uses (reformulated or the user's words)
    prompt: str = ""  # the user message the LLM gets (the standalone question when reformulated, by default)
    mode: str = "rag"  # the mode that runs: "tools" falls back to "rag" when nothing is searchable yet
    scope: Scope | None = None
    budget: Budget | None = None
    instructions: str = ""
    inline: list[InlineDoc] = field(default_factory=list)
    nodes: list = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # stored with the reply
    context_sent: bool = False
    replied: bool = False  # the assistant message is stored
    out: AnswerGuard = field(default_factory=lambda: AnswerGuard(None))  # the answer's text as the client sees it


@dataclass
class Generation:
    """What the answering steps produced; ``method`` None means no answer yet (the extractive step runs)."""

    answer: str = ""
    method: str | None = None
    fallback_reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)  # endpoint, model, usage, tool calls, truncation
    error: UpstreamError | None = None  # why the LLM gave no answer

    def to_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.fallback_reason is not None:
            out["fallback_reason"] = self.fallback_reason
        out.update(self.details)
        if self.method is not None:
            out["generation_method"] = self.method
        return out
