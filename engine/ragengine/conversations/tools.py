"""Tool-calling retrieval: the LLM decides *what* to search, the server decides *where*.

Seed: tool-calling-scoped-search.md. The model sees one tool, ``semantic_search(query, top_k)``.
The scope (the files attached to the conversation) is fixed by the server before the loop starts and
applied as a structured filter ``{"type": "in", "key": "file_id", "value": [...]}``, evaluated as
values by ``ragengine.retrieval.filters``. The seed builds ``"file_id = 'a' OR file_id = 'b'"`` by
string formatting, so an id such as ``x' OR file_id != '`` widens the search; here ids are values
and never parsed, and a tool call's other arguments (``file_ids``, ``filters``, ``index``...) are
ignored and reported, never applied. An empty scope means no search at all, not an unfiltered one.

The loop is manual and bounded: at most ``max_iterations`` rounds of tool calls (1 by default: the
seed's single round), then one last call without tools (the seed's ``tools=None``) so the model must
answer.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragengine.access.acl import Acl
from ragengine.errors import UpstreamError
from ragengine.observability import tracing

if TYPE_CHECKING:
    from ragengine.index.api import IndexAPI
    from ragengine.llm.client import LLMClient

log = logging.getLogger(__name__)

TOOL_NAME = "semantic_search"
SEMANTIC_SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Search the documents attached to this conversation and return the most relevant passages.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for, as a standalone question or phrase."},
                "top_k": {"type": "integer", "description": "How many passages to return (default 5).",
                          "default": 5, "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
ALLOWED_ARGS = frozenset({"query", "top_k"})
MAX_QUERY_CHARS = 2000


@dataclass(frozen=True)
class Scope:
    """The files a conversation may search; built by the server from the session, never by the model."""

    index_name: str
    file_ids: tuple[str, ...]
    acl: Acl | None = None  # the caller's document ACL (access control), applied to every search

    def to_filter(self) -> dict | None:
        if not self.file_ids:
            return None
        return {"type": "in", "key": "file_id", "value": list(self.file_ids)}


@dataclass
class SearchArgs:
    query: str
    top_k: int
    ignored: list[str] = field(default_factory=list)
    error: str | None = None


def parse_tool_arguments(raw: Any, *, default_top_k: int, max_top_k: int, default_query: str = "") -> SearchArgs:
    """Keep only ``query`` and ``top_k`` (clamped); everything else is reported in ``ignored``. A missing or
    empty query searches ``default_query`` (the user's message, as the seed does)."""
    if isinstance(raw, str):
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return SearchArgs("", 0, error="arguments are not valid JSON")
    else:
        args = raw
    if not isinstance(args, dict):
        return SearchArgs("", 0, error="arguments must be a JSON object")
    ignored = sorted(k for k in args if k not in ALLOWED_ARGS)
    query = args.get("query")
    if query is None or (isinstance(query, str) and not query.strip()):
        query = default_query
    if not isinstance(query, str) or not query.strip():
        return SearchArgs("", 0, ignored, error="'query' must be a non-empty string")
    top_k = args.get("top_k", default_top_k)
    if isinstance(top_k, bool) or not isinstance(top_k, (int, float, str)):
        top_k = default_top_k
    try:
        top_k = int(top_k)
    except ValueError:
        top_k = default_top_k
    return SearchArgs(query.strip()[:MAX_QUERY_CHARS], max(1, min(top_k, max_top_k)), ignored)


async def scoped_search(registry: IndexAPI, scope: Scope, query: str, top_k: int) -> list:
    """Search only inside ``scope``; an empty scope returns nothing without touching the index."""
    flt = scope.to_filter()
    if flt is None or not registry.exists(scope.index_name):
        return []
    return await registry.retrieve(scope.index_name, query, top_k, filters=flt, acl=scope.acl)


def tool_result_content(nodes: list, *, max_chars_per_chunk: int = 2000) -> str:
    chunks = [{"file_id": n.metadata.get("file_id"), "filename": n.metadata.get("filename"),
               **({"citation": n.metadata["citation"]} if n.metadata.get("citation") else {}),
               "score": round(float(n.score), 4), "text": n.text[:max_chars_per_chunk]} for n in nodes]
    return json.dumps({"chunks": chunks}, ensure_ascii=False)


@dataclass
class ToolLoopResult:
    answer: str
    nodes: list
    calls: list[dict]
    endpoint: str | None
    iterations: int
    usage: dict[str, int] = field(default_factory=dict)


def _add_usage(total: dict[str, int], body: dict) -> None:
    for key, value in (body.get("usage") or {}).items():
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value


async def run_tool_loop(llm: LLMClient, registry: IndexAPI, scope: Scope, messages: list[dict], *, max_iterations: int,
                        default_top_k: int, max_top_k: int, extra: dict | None = None,
                        on_call: Any = None, select: Any = None, default_query: str = "") -> ToolLoopResult:
    """The manual loop: call the LLM with the tool, run its calls inside ``scope``, repeat, answer.

    ``messages`` is not modified. ``on_call`` (async, optional) receives each executed call's record,
    for progress events; ``select`` (async, optional) trims each call's results to the token budget.
    Raises ``UpstreamError``/``LLMUnavailable`` from the client unchanged.
    """
    convo = list(messages)
    base = dict(extra or {})
    model = await llm.model_name()
    if model:
        base["model"] = model
    nodes_by_id: dict[str, Any] = {}
    calls: list[dict] = []
    usage: dict[str, int] = {}
    endpoint = None
    for iteration in range(max_iterations + 1):
        final_round = iteration == max_iterations
        payload = {**base, "messages": convo}
        if not final_round:
            payload.update(tools=[SEMANTIC_SEARCH_TOOL], tool_choice="auto")
        with tracing.stage("tool_round", round=iteration, final=final_round) as span:
            result = await llm.chat(payload)
            endpoint = result.endpoint
            _add_usage(usage, result.body)
            try:
                message = result.body["choices"][0]["message"]
            except (KeyError, IndexError, TypeError):
                raise UpstreamError(f"LLM at {result.endpoint} answered without a message.") from None
            tool_calls = message.get("tool_calls") or []
            tracing.annotate(span, tool_calls=len(tool_calls))
            if not tool_calls or final_round:
                answer = message.get("content") or ""
                return ToolLoopResult(answer, list(nodes_by_id.values()), calls, endpoint, iteration, usage)
            convo.append({"role": "assistant", "content": message.get("content"), "tool_calls": tool_calls})
            for call in tool_calls:
                record = await _execute(call, registry, scope, default_top_k, max_top_k, nodes_by_id, select,
                                        default_query)
                calls.append(record["log"])
                convo.append(record["message"])
                if on_call is not None:
                    await on_call(record["log"])
    raise AssertionError("unreachable")


async def _execute(call: dict, registry: IndexAPI, scope: Scope, default_top_k: int, max_top_k: int,
                   nodes_by_id: dict[str, Any], select: Any = None, default_query: str = "") -> dict:
    fn = call.get("function") or {}
    with tracing.stage("tool_call", **{"gen_ai.tool.name": str(fn.get("name"))[:64], "scope_files": len(scope.file_ids)}
                       ) as span:
        out = await _run_call(call, registry, scope, default_top_k, max_top_k, nodes_by_id, select, default_query)
        entry = out["log"]
        tracing.annotate(span, top_k=entry.get("top_k"), hits=entry.get("results"), error=entry.get("error"),
                         ignored_arguments=entry.get("ignored_arguments") or None)
        tracing.content(span, "tool.query", entry.get("query"))
        return out


async def _run_call(call: dict, registry: IndexAPI, scope: Scope, default_top_k: int, max_top_k: int,
                    nodes_by_id: dict[str, Any], select: Any, default_query: str) -> dict:
    call_id = str(call.get("id") or f"call_{len(nodes_by_id)}")
    fn = call.get("function") or {}
    name = fn.get("name")
    log_entry: dict[str, Any] = {"id": call_id, "name": name}
    if name != TOOL_NAME:
        log_entry["error"] = f"unknown tool {name!r}"
        content = json.dumps({"error": f"Unknown tool {name!r}; the only tool is {TOOL_NAME}."})
    else:
        args = parse_tool_arguments(fn.get("arguments"), default_top_k=default_top_k, max_top_k=max_top_k,
                                    default_query=default_query)
        log_entry.update(query=args.query, top_k=args.top_k, ignored_arguments=args.ignored)
        if args.error:
            log_entry["error"] = args.error
            content = json.dumps({"error": args.error})
        else:
            found = await scoped_search(registry, scope, args.query, args.top_k)
            if select is not None:
                found = await select(found)
            for node in found:
                nodes_by_id.setdefault(node.node_id, node)
            log_entry["results"] = len(found)
            log_entry["scope_file_ids"] = list(scope.file_ids)
            content = tool_result_content(found)
    return {"log": log_entry, "message": {"role": "tool", "tool_call_id": call_id, "content": content}}
