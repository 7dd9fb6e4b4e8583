"""Request models for the conversation API (sessions, threads, messages, files, reformulation).

Tolerant like the OpenAI models: unknown fields are ignored, not 422s; ``Field`` descriptions are
the API reference (they show in /docs). Responses are the store's records as dicts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

MAIN_THREAD = "main"  # every session has this thread; the store creates it with the session


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class ConversationTurn(_Model):
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
    top_k: int | None = Field(None, ge=1, le=100, description="Chunks to retrieve; unset = settings.conversation_top_k.")
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
