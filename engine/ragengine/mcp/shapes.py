"""What the MCP tools take and give, and how documents are named. Pure: no I/O.

Contract:

- A document is named across indexes by ``<index>/<doc_id>`` (``ref``; index names never hold ``/``) and,
  as a resource, by ``ragengine://<index>/<doc_id>`` with both parts percent-encoded (``uri``).
- ``search`` and ``fetch`` have the shapes OpenAI's MCP connectors and deep research expect, so those
  clients work unmodified: ``search`` gives ``{"results": [{"id", "title", "url", "text", ...}]}`` (``id`` is
  what ``fetch`` takes), ``fetch`` gives ``{"id", "title", "text", "url", "metadata"}``. Each result is one
  text content item holding that JSON, and the same object as ``structuredContent`` (its ``outputSchema``
  is declared). A search result is a document's best passage (one per document), with its score.
- A title is the document's ``title`` metadata, else ``filename``, else ``path``, else its id; a url is its
  ``url`` metadata (or an http(s) ``path``, as HTTP sources set), else its resource URI.
- Arguments are checked strictly (``"5"`` is not a number; an unknown argument is refused): a violation is
  a tool error naming the argument, which the model can read and correct (the MCP specification's
  "input validation errors").
- Tool descriptions name the indexes the caller may search and what each holds; an index it may not see
  is never named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragengine.validation import validation_message

SCHEME = "ragengine"
MAX_QUERY_CHARS = 8192
MAX_ID_CHARS = 4096
DESCRIBED_INDEXES = 50  # named in a tool's description at most (list_indexes gives all)
DESCRIPTION_CHARS = 300  # of one index's description in a tool's description


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchArgs(_Args):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for, in natural language.")
    index: str | None = Field(None, min_length=1, max_length=1024,
                              description="The index to search (list_indexes); omitted: every index you may search.")
    top_k: int = Field(5, ge=1, description="How many results (documents) at most.")
    metadata_filter: dict[str, Any] | None = Field(
        None, description="Exact match on metadata keys (AND), e.g. {\"team\": \"ops\"}.")
    filters: dict[str, Any] | None = Field(
        None, description="Structured filter: {\"type\": \"eq|ne|gt|gte|lt|lte|in|nin\", \"key\", \"value\"} or "
        "{\"type\": \"and|or\", \"filters\": [...]}.")


class FetchArgs(_Args):
    id: str = Field(min_length=3, max_length=MAX_ID_CHARS, description="A search result's id: '<index>/<doc_id>'.")


class ListIndexesArgs(_Args):
    pass


class SearchResult(BaseModel):
    id: str = Field(description="Pass to fetch for the whole document: '<index>/<doc_id>'.")
    title: str
    url: str
    text: str = Field(description="The document's passage that matched.")
    score: float = Field(description="Cosine similarity of the passage to the query, 0..1; higher is better.")
    index: str
    doc_id: str
    node_id: str
    citation: str | None = Field(None, description="Where the passage is, as a reader cites it: "
                                 "'handbook.pdf, p. 41', 'launch.pptx, slide 3' (its place is in metadata too).")
    metadata: dict[str, Any]


class SearchOutput(BaseModel):
    results: list[SearchResult]


class FetchOutput(BaseModel):
    id: str
    title: str
    text: str
    url: str
    metadata: dict[str, Any]


class IndexInfo(BaseModel):
    name: str
    description: str | None = None


class ListIndexesOutput(BaseModel):
    indexes: list[IndexInfo]


@dataclass(frozen=True)
class Tool:
    name: str
    args: type[_Args]
    output: type[BaseModel]


TOOLS = {t.name: t for t in (Tool("search", SearchArgs, SearchOutput), Tool("fetch", FetchArgs, FetchOutput),
                             Tool("list_indexes", ListIndexesArgs, ListIndexesOutput))}


def ref(index: str, doc_id: str) -> str:
    return f"{index}/{doc_id}"


def parse_ref(value: str) -> tuple[str, str] | None:
    index, sep, doc_id = value.partition("/")
    return (index, doc_id) if sep and index and doc_id else None


def uri(index: str, doc_id: str) -> str:
    return f"{SCHEME}://{quote(index, safe='')}/{quote(doc_id, safe='')}"


def parse_uri(value: str) -> tuple[str, str] | None:
    prefix = f"{SCHEME}://"
    if not value.startswith(prefix):
        return None
    index, sep, doc_id = value[len(prefix):].partition("/")
    if not sep or not index or not doc_id or "/" in doc_id:
        return None
    return unquote(index), unquote(doc_id)


def title_of(doc_id: str, metadata: dict) -> str:
    for key in ("title", "filename", "path"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return doc_id


def url_of(index: str, doc_id: str, metadata: dict) -> str:
    for key in ("url", "path"):
        value = metadata.get(key)
        if isinstance(value, str) and value.startswith(("https://", "http://")):
            return value
    return uri(index, doc_id)


def search_result(index: str, node: dict) -> dict:
    """One ``/retrieve`` result (``RetrievedNode.to_result()``) of ``index`` as a search result."""
    meta = node.get("metadata") or {}
    return {"id": ref(index, node["doc_id"]), "title": title_of(node["doc_id"], meta),
            "url": url_of(index, node["doc_id"], meta), "text": node["text"], "score": node["score"], "index": index,
            "doc_id": node["doc_id"], "node_id": node["node_id"], "citation": meta.get("citation"), "metadata": meta}


def best_first(results: list[dict], top_k: int) -> list[dict]:
    """Results of several indexes merged: by score (the same cosine scale everywhere), best ``top_k``."""
    return sorted(results, key=lambda r: -r["score"])[:top_k]


def fetched(index: str, doc_id: str, text: str, metadata: dict) -> dict:
    return {"id": ref(index, doc_id), "title": title_of(doc_id, metadata), "text": text,
            "url": url_of(index, doc_id, metadata), "metadata": metadata}


def arguments(name: str, raw: dict[str, Any] | None) -> _Args:
    """The tool's arguments, checked; ``ValidationError`` names what is wrong."""
    return TOOLS[name].args.model_validate(raw or {})


def argument_problem(exc: ValidationError) -> str:
    """A validation error as one line naming each bad argument (never the value: it is the caller's data)."""
    return "Invalid arguments: " + validation_message(exc)


def result(payload: dict) -> types.CallToolResult:
    """A tool's answer: the JSON as the one text item OpenAI's clients read, and as structured content."""
    import json

    return types.CallToolResult(content=[types.TextContent(text=json.dumps(payload, ensure_ascii=False))],
                                structured_content=payload)


def failure(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _holds(indexes: list[IndexInfo]) -> str:
    if not indexes:
        return "You may not search any index now."
    lines = []
    for info in indexes[:DESCRIBED_INDEXES]:
        about = (info.description or "").strip().replace("\n", " ")
        about = about if len(about) <= DESCRIPTION_CHARS else about[:DESCRIPTION_CHARS - 1] + "…"
        lines.append(f"- {info.name}" + (f": {about}" if about else ""))
    more = len(indexes) - DESCRIBED_INDEXES
    if more > 0:
        lines.append(f"- and {more} more (list_indexes names them all)")
    return "The knowledge base holds these indexes:\n" + "\n".join(lines)


# Built once: a tools/list copies and fills them in per caller.
INPUT_SCHEMAS = {name: tool.args.model_json_schema() for name, tool in TOOLS.items()}
OUTPUT_SCHEMAS = {name: tool.output.model_json_schema() for name, tool in TOOLS.items()}


def input_schema(name: str) -> dict[str, Any] | None:
    """A tool's argument schema whatever the caller (the SDK checks ``Mcp-Param-*`` headers with it: without
    it, every 2026-07-28 call would run a whole tools/list first); None for an unknown tool."""
    return INPUT_SCHEMAS.get(name)


def tools(indexes: list[IndexInfo], max_top_k: int) -> list[types.Tool]:
    """The tools as the caller sees them: descriptions naming the indexes it may search (``indexes``)."""
    import copy

    holds = _holds(indexes)
    search_schema = copy.deepcopy(INPUT_SCHEMAS["search"])
    search_schema["properties"]["top_k"]["maximum"] = max_top_k
    if 0 < len(indexes) <= DESCRIBED_INDEXES:
        search_schema["properties"]["index"]["anyOf"][0]["enum"] = [i.name for i in indexes]
    read_only = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                      open_world_hint=False)
    return [
        types.Tool(name="search", title="Search the knowledge base", input_schema=search_schema,
                   output_schema=OUTPUT_SCHEMAS["search"], annotations=read_only,
                   description="Search the knowledge base for passages relevant to a question. Each result is a "
                   "document's best passage with its id (pass it to fetch for the whole document), title, url, "
                   "text and score (0..1, higher is better), best first. " + holds),
        types.Tool(name="fetch", title="Fetch a document", input_schema=INPUT_SCHEMAS["fetch"],
                   output_schema=OUTPUT_SCHEMAS["fetch"], annotations=read_only,
                   description="Fetch one whole document by the id a search result gave ('<index>/<doc_id>'): its "
                   "full text, title, url and metadata."),
        types.Tool(name="list_indexes", title="List the indexes", input_schema=INPUT_SCHEMAS["list_indexes"],
                   output_schema=OUTPUT_SCHEMAS["list_indexes"], annotations=read_only,
                   description="List the indexes you may search, with what each holds. " + holds),
    ]
