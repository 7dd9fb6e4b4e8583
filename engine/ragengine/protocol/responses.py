"""OpenAI's Responses API on the wire: the request (the fields the engine reads; the rest is tolerated)
and the response object, as published in ``/openapi.json``.

What the engine does with each field is in docs/openai.md; ``responses/plan.py`` turns a request into
what the service runs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragengine.protocol.vector_stores import Metadata, RankingOptions

FILE_SEARCH_RESULTS = "file_search_call.results"


def vector_store_ids(tools: Any) -> tuple[str, ...]:
    """The vector stores a request's ``file_search`` tools name, in order, each once. Malformed input gives
    what can be read (the handler refuses it with a 400); access control reads the stores through this."""
    found: dict[str, None] = {}
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("type") == "file_search":
            ids = tool.get("vector_store_ids")
            for store_id in ids if isinstance(ids, list) else ():
                if isinstance(store_id, str):
                    found[store_id] = None
    return tuple(found)


class FileSearchTool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["file_search"]
    vector_store_ids: list[str] = Field(..., min_length=1, max_length=16)
    filters: dict[str, Any] | None = Field(None, description="OpenAI comparison / compound filter on attributes.")
    max_num_results: int = Field(10, ge=1, le=50)
    ranking_options: RankingOptions | None = None


class ResponseRequest(BaseModel):
    """``POST /v1/responses``. ``input``: a string or a list of message items; ``tools``: ``file_search`` only."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(None, description="A model the LLM serves is used as named; any other name (an "
                              "OpenAI model's) is answered by the served model, named in the response.")
    input: str | list[dict[str, Any]] = Field(..., description="The user's input, or message items.")
    instructions: str | None = Field(None, description="A system message for this response only.")
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = Field("auto", description="'auto', 'required', 'none' or {type: file_search}.")
    include: list[str] = Field(default_factory=list, description=f"'{FILE_SEARCH_RESULTS}' returns the search hits.")
    previous_response_id: str | None = Field(None, description="Continue from a stored response.")
    store: bool = Field(True, description="Keep the response, for GET and for previous_response_id.")
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    max_output_tokens: int | None = Field(None, ge=1)
    metadata: Metadata | None = None
    user: str | None = None
    parallel_tool_calls: bool = True
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None


# --- the response object (published in /openapi.json; the service builds plain dicts) --------------------
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResponseUsage(_Open):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: dict[str, Any] = Field(default_factory=dict)
    output_tokens_details: dict[str, Any] = Field(default_factory=dict)


class ResponseObject(_Open):
    id: str
    object: Literal["response"]
    created_at: float
    status: Literal["completed", "failed", "in_progress", "incomplete"]
    model: str
    output: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    usage: ResponseUsage | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: bool


class InputItemList(_Open):
    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool
