"""OpenAI chat-completions wire models, with ragengine's extensions.

Tolerant on purpose (``extra="allow"``): any OpenAI field we do not model (temperature, top_p, stop,
seed, response_format, logprobs, whatever the SDK adds next) is kept and reaches the LLM unchanged.
The engine validates only what it uses itself. The models double as the API reference.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragengine.settings import CONTEXT_TOKEN_RATIO_MAX, CONTEXT_TOKEN_RATIO_MIN

log = logging.getLogger(__name__)

# Fields that are ours, never sent upstream.
ENGINE_FIELDS = ("index_name", "context_token_ratio", "filters", "metadata_filter", "reformulate")
MODEL_ALIAS_PREFIX = "rag:"


def requested_index(index_name: str | None, model: str | None) -> str | None:
    """The index a chat request names: ``index_name``, else a ``rag:<index>`` model alias. Access control
    reads the index through this same function, so it checks exactly the index the request will use."""
    if model and model.startswith(MODEL_ALIAS_PREFIX):
        return index_name or model[len(MODEL_ALIAS_PREFIX):] or None
    return index_name


class OpenAIBaseModel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ChatCompletionRequest(OpenAIBaseModel):
    """``POST /v1/chat/completions``: OpenAI's request plus ``index_name`` and ``context_token_ratio``."""

    model: str | None = Field(
        None,
        description="Model sent upstream; when unset, the one the LLM server serves. 'rag:<index>' is an alias "
        "that routes the request to RAG on <index> (for clients that cannot add fields).",
    )
    messages: list[dict[str, Any]] = Field(description="OpenAI chat messages (kept as sent).")
    stream: bool = Field(False, description="Answer as OpenAI chat.completion.chunk server-sent events.")
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=1, description="Upper bound on generated tokens; lowered to fit the window.")
    max_completion_tokens: int | None = Field(None, ge=1, description="Newer name for max_tokens; same handling.")
    n: int | None = Field(
        None, ge=1, le=128, description="Choices to generate; passed to the LLM (all choices share one context)."
    )
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    index_name: str | None = Field(None, description="Index to retrieve context from; unset = plain pass-through.")
    context_token_ratio: float | None = Field(
        None, description=f"Share ({CONTEXT_TOKEN_RATIO_MIN}-{CONTEXT_TOKEN_RATIO_MAX}) of the free token window "
        "given to retrieved context; default from settings."
    )
    filters: dict[str, Any] | None = Field(
        None, description="Restrict retrieval: OpenAI-style structured filters, as in /retrieve "
        "({'type': 'eq', 'key': 'lang', 'value': 'en'}, or 'and'/'or' of those).",
    )
    metadata_filter: dict[str, Any] | None = Field(
        None, description="Restrict retrieval to chunks whose metadata has these exact values (KAITO's form)."
    )
    reformulate: bool | None = Field(
        None, description="Rewrite a follow-up into a standalone question before retrieval (LLM call when there is "
        "history); unset = the engine's setting. The query used is reported in rag.query_used.",
    )

    def upstream(self) -> dict[str, Any]:
        """What goes to the LLM: every field the caller set, the OpenAI fields this model does not name
        (kept by ``extra="allow"``) included, as sent; the engine's own fields left out."""
        return upstream_body(self.model_dump(exclude_unset=True))


class SourceNode(OpenAIBaseModel):
    """A retrieved chunk that went into the prompt (KAITO's ``source_nodes`` item)."""

    doc_id: str
    node_id: str
    text: str
    score: float = Field(description="Cosine similarity of the chunk to the query, in [0, 1].")
    metadata: dict[str, Any] = Field(default_factory=dict)


class RagInfo(OpenAIBaseModel):
    """What the engine did with the request (extension field ``rag``)."""

    applied: bool = Field(description="True when retrieved context went into the prompt.")
    reason: str | None = Field(None, description="Why RAG was not applied (bypass rule, no_context, ...).")
    no_context: str | None = Field(
        None, description="With reason no_context: what the engine did (the no_context setting: answer, refuse, "
        "disclaim).")
    index_name: str | None = None
    endpoint: str | None = Field(None, description="Base URL of the LLM that answered.")
    top_k: int | None = None
    retrieved: int | None = None
    selected: int | None = None
    context_tokens: int | None = None
    context_budget: int | None = None
    prompt_tokens: int | None = None
    max_tokens: int | None = Field(None, description="max_tokens sent upstream after fitting the window.")
    max_tokens_requested: int | None = None
    token_counter: str | None = Field(None, description="How tokens were counted: vllm, llama.cpp, local, estimate.")
    query_used: str | None = Field(None, description="The retrieval query (after reformulation, when it ran).")
    reformulation: dict[str, Any] | None = Field(None, description="What the reformulation step did, when requested.")
    screening: dict[str, Any] | None = Field(
        None, description="Retrieved chunks screened before the prompt (screened, stripped, quarantined, reasons).")


class ChatMessage(OpenAIBaseModel):
    role: str
    content: str | None = None


class Choice(OpenAIBaseModel):
    index: int
    message: ChatMessage
    finish_reason: str | None = None
    logprobs: Any = None


class Usage(OpenAIBaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletionResponse(OpenAIBaseModel):
    id: str = Field(default_factory=lambda: new_completion_id())
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[Choice]
    usage: Usage | None = None
    source_nodes: list[SourceNode] | None = None
    generation_method: Literal["llm", "extractive_fallback", "no_context_refusal"] = "llm"
    fallback_reason: str | None = None
    rag: RagInfo | None = None
    guardrails: dict[str, Any] | None = Field(
        None, description="What the output policy did: action (allow, redact, block), the scanners that acted "
        "(type, action, count) and the policy's sha256 prefix. Never what was removed.")


class DeltaMessage(OpenAIBaseModel):
    role: str | None = None
    content: str | None = None


class ChunkChoice(OpenAIBaseModel):
    index: int
    delta: DeltaMessage
    finish_reason: str | None = None
    logprobs: Any = None


class ChatCompletionChunk(OpenAIBaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]


class ModelCard(OpenAIBaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "ragengine"


class ModelList(OpenAIBaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def upstream_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request minus the engine's own fields: what an OpenAI server accepts."""
    return {k: v for k, v in body.items() if k not in ENGINE_FIELDS}
