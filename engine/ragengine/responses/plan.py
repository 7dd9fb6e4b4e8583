"""A Responses request → what the service runs, and the objects it answers with. Pure: no I/O, no clock.

Contract:

- ``input`` is a string (one user message) or message items (``{"role", "content"}`` with a string or
  ``input_text`` / ``output_text`` parts, ``type: "message"`` optional). Other item types (function call
  outputs, item references, images, files) are a 400 naming the item.
- ``tools``: ``file_search`` tools only (all of them searched, their stores merged); any other tool type is
  a 400. ``tool_choice``: ``none`` searches nothing; ``auto``, ``required`` and ``{"type": "file_search"}``
  search once with the user's last message (the engine decides, not the model: any LLM works).
- The conversation sent upstream: ``instructions`` as the system message (not carried over from a
  previous response, as on OpenAI), the numbered sources block and the citation rule, the previous
  responses' inputs and answers in order, then this input.
- Output items: a ``file_search_call`` (when a search ran; ``results`` only with
  ``include: ["file_search_call.results"]``), then the assistant ``message`` with one ``output_text``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ragengine.errors import BadRequest
from ragengine.index.places import place_fields
from ragengine.protocol.responses import FILE_SEARCH_RESULTS, FileSearchTool, ResponseRequest
from ragengine.responses.citations import Source
from ragengine.validation import validation_message, validation_param
from ragengine.vectorstores.objects import file_of

TEXT_PARTS = ("input_text", "output_text", "text")
ROLES = ("user", "assistant", "system", "developer")
CITE_RULE = ("Answer from the numbered sources below when they are relevant. After each sentence that uses a "
             "source, cite it with its number in square brackets, like [1]. If the sources do not contain the "
             "answer, say so.")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class Plan:
    request: ResponseRequest
    items: list[dict]  # this request's input items, with ids (what input_items lists)
    tools: list[FileSearchTool]
    search: list[FileSearchTool]  # the file_search tools to run (empty: no search)
    include_results: bool

    @property
    def store_ids(self) -> list[str]:
        """Every store the tools name (checked whether or not a search runs)."""
        return list(dict.fromkeys(s for tool in self.tools for s in tool.vector_store_ids))


def _fail(message: str, param: str) -> BadRequest:
    return BadRequest(message, param=param)


def parse(body: Any) -> Plan:
    if not isinstance(body, dict):
        raise BadRequest("Invalid request: the body must be a JSON object.")
    try:
        req = ResponseRequest.model_validate(body)
    except ValidationError as exc:
        raise _fail(f"Invalid request: {validation_message(exc)}", validation_param(exc) or "") from None
    if req.background:
        raise _fail("background responses are not supported by this engine; leave 'background' unset.", "background")
    extra = req.model_extra or {}
    for name in ("conversation", "prompt"):
        if extra.get(name) is not None:
            raise _fail(f"'{name}' is not supported by this engine; use previous_response_id and instructions.", name)
    text_format = ((extra.get("text") or {}).get("format") or {}) if isinstance(extra.get("text"), dict) else {}
    if isinstance(text_format, dict) and text_format.get("type", "text") != "text":
        raise _fail("text.format: only plain text output is supported (no JSON schema / structured outputs).",
                    "text.format")
    tools = []
    for i, tool in enumerate(req.tools):
        if not isinstance(tool, dict) or tool.get("type") != "file_search":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise _fail(f"tools[{i}]: tool type {kind!r} is not supported; this engine runs 'file_search' only.",
                        f"tools[{i}].type")
        try:
            tools.append(FileSearchTool.model_validate(tool))
        except ValidationError as exc:
            within = f"tools[{i}]"
            raise _fail(validation_message(exc, within=within), validation_param(exc, within=within) or within
                        ) from None
    choice = req.tool_choice
    if isinstance(choice, dict) and choice.get("type") != "file_search":
        raise _fail(f"tool_choice {choice!r} is not supported; use 'auto', 'required', 'none' or "
                    "{'type': 'file_search'}.", "tool_choice")
    if isinstance(choice, str) and choice not in ("auto", "required", "none"):
        raise _fail(f"tool_choice {choice!r} is not one of 'auto', 'required', 'none'.", "tool_choice")
    if (choice == "required" and not tools) or (isinstance(choice, dict) and not tools):
        raise _fail("tool_choice asks for file_search but no file_search tool is given.", "tool_choice")
    items = input_items(req.input)
    if not any(i["role"] == "user" for i in items):
        raise _fail("input must contain a user message.", "input")
    return Plan(req, items, tools, tools if choice != "none" else [], FILE_SEARCH_RESULTS in req.include)


def input_items(value: str | list[dict[str, Any]]) -> list[dict]:
    """Input as OpenAI's message items (what ``input_items`` lists), each with an id."""
    if isinstance(value, str):
        if not value.strip():
            raise _fail("input must not be empty.", "input")
        return [_message("user", [{"type": "input_text", "text": value}])]
    if not value:
        raise _fail("input must not be an empty list.", "input")
    out = []
    for i, item in enumerate(value):
        kind, role = item.get("type", "message"), item.get("role")
        if kind != "message" or role not in ROLES:
            raise _fail(f"input[{i}]: only message items with a role ({', '.join(ROLES)}) are supported; got "
                        f"type {kind!r}.", f"input[{i}]")
        content = item.get("content")
        if isinstance(content, str):
            parts = [{"type": "output_text" if role == "assistant" else "input_text", "text": content}]
        elif isinstance(content, list) and content:
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS or not isinstance(part.get("text"), str):
                    raise _fail(f"input[{i}].content[{j}]: only text parts are supported.", f"input[{i}].content")
                parts.append({"type": part["type"], "text": part["text"]})
        else:
            raise _fail(f"input[{i}].content must be a string or a list of text parts.", f"input[{i}].content")
        item_id = item.get("id")
        out.append(_message(role, parts, item_id if isinstance(item_id, str) and item_id else None))
    return out


def _message(role: str, content: list[dict], item_id: str | None = None) -> dict:
    return {"id": item_id or new_id("msg"), "type": "message", "role": role, "content": content}


def item_text(item: dict) -> str:
    return "\n".join(p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict))


def chat_messages(items: list[dict]) -> list[dict]:
    """Message items (inputs and earlier outputs) as chat messages; ``developer`` becomes ``system``."""
    out = []
    for item in items:
        if item.get("type", "message") != "message":
            continue
        role = "system" if item["role"] == "developer" else item["role"]
        out.append({"role": role, "content": item_text(item)})
    return out


def query_of(items: list[dict]) -> str:
    """What file_search looks for: the last user message of this input."""
    return next(item_text(i) for i in reversed(items) if i["role"] == "user")


def number_sources(nodes: list) -> list[Source]:
    """The chosen chunks grouped by file, numbered in the order of each file's best chunk; each chunk
    with its place (what a citation of it says)."""
    grouped: dict[str, tuple[str, list[str], list[dict]]] = {}
    for node in nodes:
        file_id, filename = file_of(node.doc_id, node.metadata)
        _, texts, places = grouped.setdefault(file_id, (filename, [], []))
        texts.append(node.text)
        places.append(place_fields(node.metadata))
    return [Source(n, file_id, name, tuple(texts), tuple(places))
            for n, (file_id, (name, texts, places)) in enumerate(grouped.items(), 1)]


def sources_block(sources: list[Source]) -> str:
    parts = [f"[{s.number}] {s.filename}\n" + "\n\n".join(s.texts) for s in sources]
    return "Sources:\n\n" + "\n\n".join(parts)


def prompt(instructions: str | None, sources: list[Source], history: list[dict], current: list[dict]) -> list[dict]:
    system = [instructions.strip()] if instructions and instructions.strip() else []
    if sources:
        system += [CITE_RULE, sources_block(sources)]
    head = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    return head + chat_messages(history) + chat_messages(current)


# --- output ------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What generation produced, for the response object."""

    text: str = ""
    annotations: list[dict] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = "stop"
    extractive_reason: str | None = None  # set when the answer is extractive (no LLM, or it failed)


def search_call(call_id: str, queries: list[str], status: str, results: list[dict] | None) -> dict:
    return {"id": call_id, "type": "file_search_call", "status": status, "queries": queries, "results": results}


def hit(node: Any) -> dict:
    from ragengine.vectorstores.objects import attributes_of

    file_id, filename = file_of(node.doc_id, node.metadata)
    return {"file_id": file_id, "filename": filename, "score": round(float(node.score), 6), "text": node.text,
            "attributes": attributes_of(node.metadata), **place_fields(node.metadata)}


def message_item(item_id: str, text: str, annotations: list[dict], status: str = "completed") -> dict:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}]}


def response_object(plan: Plan, *, response_id: str, created_at: int, model: str, output: list[dict],
                    status: str, outcome: Outcome | None = None, error: dict | None = None) -> dict:
    req = plan.request
    usage = None
    if outcome is not None:
        usage = {"input_tokens": outcome.input_tokens, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": outcome.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": outcome.input_tokens + outcome.output_tokens}
    incomplete = {"reason": "max_output_tokens"} if outcome is not None and outcome.finish_reason == "length" else None
    body = {
        "id": response_id, "object": "response", "created_at": created_at, "status": "incomplete" if incomplete else status,
        "error": error, "incomplete_details": incomplete, "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens, "model": model, "output": output,
        "parallel_tool_calls": req.parallel_tool_calls, "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": None, "summary": None}, "store": req.store, "temperature": req.temperature,
        "text": {"format": {"type": "text"}}, "tool_choice": req.tool_choice,
        "tools": [t.model_dump() for t in plan.tools], "top_p": req.top_p,
        "truncation": req.truncation or "disabled", "usage": usage, "user": req.user, "metadata": req.metadata or {},
    }
    if outcome is not None and outcome.extractive_reason:
        body["generation_method"] = "extractive_fallback"
        body["fallback_reason"] = outcome.extractive_reason
    return body


def output_text(response: dict) -> str:
    return "".join(p.get("text", "") for item in response.get("output", []) if item.get("type") == "message"
                   for p in item.get("content", []))
