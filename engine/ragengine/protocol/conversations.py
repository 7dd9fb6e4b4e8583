"""Request models for the conversation API (sessions, threads, messages, files, reformulation).

Strict: a field the engine does not know is a 400 naming it, never silently ignored (the seed's own
names, ``message``, ``use_rag``, ``rag_limit``, ``session_id``, ``parent_message_id``, ``new_thread_id``,
are understood). Conversation turns inside a request are data and stay tolerant. ``Field``
descriptions are the API reference (they show in /docs).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

MAIN_THREAD = "main"  # every session has this thread; the store creates it with the session


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ConversationTurn(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)  # a client's message objects (ids, times...)

    role: str = Field(description="'user' or 'assistant' (other roles are ignored by the reformulator).")
    content: Any = Field(
        None, validation_alias=AliasChoices("content", "message"),
        description="The turn's text (a string or OpenAI content parts); the seed's 'message' key is accepted too.",
    )


class ReformulateRequest(_Model):
    userMessage: str = Field(min_length=1, max_length=100_000, description="The user's latest message.")
    conversation: list[ConversationTurn] = Field(
        default_factory=list, max_length=10_000,
        description="Earlier turns, oldest first; only the last `historyMessages` are used.",
    )
    systemPrompt: str | None = Field(None, max_length=20_000, description="Overrides the engine's reformulation prompt.")
    historyMessages: int | None = Field(None, ge=1, le=100, description="Overrides settings.reformulate_history.")


class CreateSessionRequest(_Model):
    user_id: str | None = Field(None, max_length=256, description="Owner, for listing sessions by user.")
    title: str | None = Field(None, max_length=512)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form; stored and returned as is.")
    index_name: str | None = Field(
        None, max_length=256, description="A knowledge index searched (unscoped) in addition to the session's files.",
    )
    file_ids: list[str] = Field(default_factory=list, max_length=1000, description="Uploaded files to attach.")


class AttachFilesRequest(_Model):
    file_ids: list[str] = Field(min_length=1, max_length=1000)


class CreateThreadRequest(_Model):
    parent_message_id: str = Field(description="The message to branch from; the thread inherits history up to it.")
    title: str | None = Field(None, max_length=512)
    new_thread_id: str | None = Field(
        None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$",
        description="The new thread's id (the seed's field); unset = generated. 409 if the session has it already.",
    )


class MessageRequest(_Model):
    content: str = Field(
        min_length=1, max_length=200_000, validation_alias=AliasChoices("content", "message"),
        description="The user's message ('message' is accepted too).",
    )
    thread_id: str = Field(MAIN_THREAD, description="Thread to post in; 'main' unless branching.")
    stream: bool = Field(False, description="Answer as server-sent progress events instead of one JSON object.")
    mode: Literal["rag", "tools", "none"] = Field(
        "rag", description="'rag': retrieve then answer; 'tools': the LLM calls semantic_search itself (scoped "
        "to the session's files); 'none': plain chat with history, no retrieval.",
    )
    reformulate: bool | None = Field(
        None, description="Rewrite the message into a standalone question before search; unset = settings.reformulate.",
    )
    top_k: int | None = Field(
        None, ge=1, le=100, validation_alias=AliasChoices("top_k", "rag_limit"),
        description="Chunks to retrieve ('rag_limit', the seed's name, is accepted too); unset = "
        "settings.conversation_top_k.",
    )
    use_rag: bool | None = Field(
        None, description="The seed's switch: false = mode 'none' (no retrieval), true = retrieval (mode 'rag' "
        "unless mode says 'tools'). Contradicting an explicit mode is a 400.",
    )
    session_id: str | None = Field(
        None, description="The seed's clients repeat the session in the body; it must be the one in the path.",
    )
    parent_message_id: str | None = Field(
        None, description="Branch: post into a new thread `thread_id` started from this message (the seed's "
        "threading). The thread must not exist yet; unset thread_id = a generated one.",
    )
    file_ids: list[str] = Field(default_factory=list, max_length=100, description="Files to attach with this message.")
    system_prompt: str | None = Field(None, max_length=20_000, description="Replaces the default instructions.")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000, description="Upper bound for the answer's length.")
    groundedness_details: bool = Field(False, description="Include per-sentence support in the metadata.")

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the message is empty")
        return value

    @model_validator(mode="after")
    def _seed_switch(self) -> MessageRequest:
        if self.use_rag is None:
            return self
        explicit = "mode" in self.model_fields_set
        if self.use_rag is False:
            if explicit and self.mode != "none":
                raise ValueError(f"use_rag: false contradicts mode '{self.mode}'")
            self.mode = "none"
        elif explicit and self.mode == "none":
            raise ValueError("use_rag: true contradicts mode 'none'")
        return self


class ReformulateResponse(BaseModel):
    """``POST /v1/chat/reformulate``: the seed's field names."""

    reformulatedMessage: str = Field(description="The standalone question (the message itself when not rewritten).")
    userMessage: str
    reformulated: bool
    reason: str | None = Field(None, description="Why the message was used unchanged, when it was.")
    endpoint: str | None = Field(None, description="The LLM that rewrote it.")
    historyUsed: int
    latencyMs: float


class MessageResponse(BaseModel):
    """``POST /v1/sessions/{id}/messages`` without streaming: both stored messages."""

    session_id: str
    thread_id: str
    user_message: dict[str, Any]
    assistant_message: dict[str, Any] = Field(description="Its metadata: sources, groundedness, endpoint, ...")
