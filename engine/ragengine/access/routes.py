"""The one table of what every route needs: role, and where the index it touches comes from. Pure.

Every API route of the engine has exactly one entry here; ``create_app`` refuses to build an app with a
route missing from this table (``uncovered``), so a route added tomorrow is born inside access control.
The enforcement (``access.enforce``) reads only this table: no route checks access by itself.

``index`` says where the index a request touches is named:

- ``none``: no index (reformulation, sessions and files, which belong to their creator: ``owned``);
- ``path``: the ``{index_name}`` path parameter;
- ``body``: the JSON body's ``index_name`` (absent means no index, e.g. a session without one);
- ``form``: the multipart form's ``index_name`` (``POST /index/files``);
- ``chat``: the chat request's ``index_name`` or its ``rag:<index>`` model alias;
- ``list``: the route lists indexes; the handler shows only those the caller sees;
- ``store``: the ``{vector_store_id}`` path parameter: a vector store's id is its index's name;
- ``tools``: every vector store the body's ``file_search`` tools name (``POST /v1/responses``); each is
  checked, the first the caller may not see decides;
- ``argument``: an MCP tool call's or resource read's index (``MCP_CALLS``; the handler names it).

``creates`` marks routes that may create the index they name: a name outside the caller's patterns is
then 403 (nothing exists to hide), where on other routes it is 404, the same as a missing index.
``open`` routes (the kubelet's probes, Prometheus, the console's page and files) need no credentials and must
reveal no documents.
``llm`` marks routes that may call the LLM: a principal over its tokens-per-minute limit gets 429 there
(requests per minute are counted on every route that needs credentials and is ``metered``).
``query`` marks the POST routes that change nothing (a search, a chat completion); ``database`` the routes
on data kept in the sessions' database besides the ``owned`` ones (the vector stores' catalog). With the
method they decide what a FAISS engine's stand-by serves (``served_by_standby``).

``/mcp`` (the Model Context Protocol endpoint, docs/mcp.md) is one route for the transport: the principal
must be authenticated and at least ``read``, and its HTTP requests are not counted. What is counted and
checked per index is each MCP call that reads documents: ``MCP_CALLS`` holds their rules, applied by
``access.enforce.authorize_call`` exactly as ``authorize`` applies ``ROUTES`` (decision, rate limit, audit).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from ragengine.access.rules import Role


class IndexFrom(enum.Enum):
    none = "none"
    path = "path"
    body = "body"
    form = "form"
    chat = "chat"
    list = "list"
    store = "store"
    tools = "tools"
    argument = "argument"


@dataclass(frozen=True)
class Rule:
    role: Role | None  # None: open to everyone, no credentials
    index: IndexFrom = IndexFrom.none
    owned: bool = False  # sessions / files: the store shows a caller only their own (admin: everyone's)
    creates: bool = False
    llm: bool = False  # may spend LLM tokens (tokens-per-minute limits apply)
    query: bool = False  # a POST that changes nothing: a search, a chat completion
    database: bool = False  # on data in the sessions' database (the vector stores' catalog); owned routes are too
    metered: bool = True  # counted against requests per minute (/mcp: its tool calls are, not its HTTP requests)
    standby: bool = True  # False: only the writer's services answer it (/mcp's sessions start with them)

    @property
    def open(self) -> bool:
        return self.role is None


OPEN = Rule(None)
R, W, A = Role.read, Role.write, Role.admin

ROUTES: dict[tuple[str, str], Rule] = {
    # probes and scraping
    ("GET", "/health"): OPEN,
    ("GET", "/ready"): OPEN,
    ("GET", "/metrics"): OPEN,
    # the console (api/console.py): its page and files hold no data; /whoami tells it what its key may do
    ("GET", "/ui"): OPEN,
    ("GET", "/ui/"): OPEN,
    ("GET", "/ui/assets/{name}"): OPEN,
    ("GET", "/whoami"): Rule(R, IndexFrom.list),
    # KAITO-compatible index routes
    ("POST", "/index"): Rule(W, IndexFrom.body, creates=True),
    ("POST", "/index/files"): Rule(W, IndexFrom.form, creates=True),
    ("GET", "/indexes"): Rule(R, IndexFrom.list),
    ("GET", "/indexes/{index_name}/documents"): Rule(R, IndexFrom.path),
    ("POST", "/indexes/{index_name}/documents"): Rule(W, IndexFrom.path),
    ("POST", "/indexes/{index_name}/documents/metadata"): Rule(W, IndexFrom.path),
    ("POST", "/indexes/{index_name}/documents/delete"): Rule(W, IndexFrom.path),
    ("DELETE", "/indexes/{index_name}"): Rule(A, IndexFrom.path),
    ("POST", "/persist/{index_name}"): Rule(A, IndexFrom.path),
    ("POST", "/load/{index_name}"): Rule(A, IndexFrom.path, creates=True),
    ("POST", "/retrieve"): Rule(R, IndexFrom.body, query=True),
    # index versions (re-index, rollback) and export / import: an export holds every document whatever its ACL,
    # so only an admin (who sees every document) may take one
    ("POST", "/indexes/{index_name}/reindex"): Rule(W, IndexFrom.path),
    ("GET", "/indexes/{index_name}/reindex"): Rule(W, IndexFrom.path),
    ("GET", "/indexes/{index_name}/versions"): Rule(W, IndexFrom.path),
    ("POST", "/indexes/{index_name}/versions/{version}/activate"): Rule(A, IndexFrom.path),
    ("DELETE", "/indexes/{index_name}/versions/{version}"): Rule(A, IndexFrom.path),
    ("GET", "/indexes/{index_name}/export"): Rule(A, IndexFrom.path),
    ("POST", "/indexes/{index_name}/import"): Rule(W, IndexFrom.path, creates=True),
    # evaluations: quality control of an index, like a re-index (write). A run runs as its creator, with their
    # document ACL, and belongs to them: others get the 404 of a missing run (admins see every run).
    ("POST", "/indexes/{index_name}/evaluations"): Rule(W, IndexFrom.path),
    ("GET", "/indexes/{index_name}/evaluations"): Rule(W, IndexFrom.path, database=True),
    ("PUT", "/indexes/{index_name}/evaluations/golden-set"): Rule(W, IndexFrom.path),  # from a source's sync
    ("GET", "/indexes/{index_name}/evaluations/golden-set"): Rule(W, IndexFrom.path, database=True),
    ("GET", "/indexes/{index_name}/evaluations/{evaluation_id}"): Rule(W, IndexFrom.path, owned=True),
    ("GET", "/indexes/{index_name}/evaluations/{evaluation_id}/compare/{other_id}"): Rule(W, IndexFrom.path,
                                                                                      owned=True),
    # OpenAI-compatible
    ("POST", "/v1/chat/completions"): Rule(R, IndexFrom.chat, llm=True, query=True),
    ("GET", "/v1/models"): Rule(R, IndexFrom.list),
    # conversations
    ("POST", "/v1/chat/reformulate"): Rule(R, llm=True, query=True),
    ("POST", "/v1/files"): Rule(R, owned=True),
    ("GET", "/v1/files"): Rule(R, owned=True),
    ("GET", "/v1/files/{file_id}"): Rule(R, owned=True),
    ("DELETE", "/v1/files/{file_id}"): Rule(R, owned=True),
    ("POST", "/v1/sessions"): Rule(R, IndexFrom.body, owned=True),
    ("GET", "/v1/sessions"): Rule(R, owned=True),
    ("GET", "/v1/sessions/{session_id}"): Rule(R, owned=True),
    ("DELETE", "/v1/sessions/{session_id}"): Rule(R, owned=True),
    ("GET", "/v1/sessions/{session_id}/messages"): Rule(R, owned=True),
    ("POST", "/v1/sessions/{session_id}/messages"): Rule(R, owned=True, llm=True),
    ("GET", "/v1/sessions/{session_id}/files"): Rule(R, owned=True),
    ("POST", "/v1/sessions/{session_id}/files"): Rule(R, owned=True),
    ("DELETE", "/v1/sessions/{session_id}/files/{file_id}"): Rule(R, owned=True),
    ("POST", "/v1/sessions/{session_id}/threads"): Rule(R, owned=True),
    ("GET", "/v1/sessions/{session_id}/threads"): Rule(R, owned=True),
    ("GET", "/v1/sessions/{session_id}/threads/{thread_id}"): Rule(R, owned=True),
    # OpenAI vector stores: a vector store is an index (its id is the index's name), so these are index
    # routes with the roles of their KAITO counterparts (writing documents: write; deleting: admin).
    # ``index_name`` in the create body is the engine's extension that names the store's index.
    ("GET", "/v1/vector_stores"): Rule(R, IndexFrom.list, database=True),
    ("POST", "/v1/vector_stores"): Rule(W, IndexFrom.body, creates=True, database=True),
    ("GET", "/v1/vector_stores/{vector_store_id}"): Rule(R, IndexFrom.store, database=True),
    ("POST", "/v1/vector_stores/{vector_store_id}"): Rule(W, IndexFrom.store, database=True),
    ("DELETE", "/v1/vector_stores/{vector_store_id}"): Rule(A, IndexFrom.store, database=True),
    # llm: rewrite_query
    ("POST", "/v1/vector_stores/{vector_store_id}/search"): Rule(R, IndexFrom.store, llm=True, query=True, database=True),
    ("GET", "/v1/vector_stores/{vector_store_id}/files"): Rule(R, IndexFrom.store, database=True),
    ("POST", "/v1/vector_stores/{vector_store_id}/files"): Rule(W, IndexFrom.store, database=True),
    ("GET", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): Rule(R, IndexFrom.store, database=True),
    ("POST", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): Rule(W, IndexFrom.store, database=True),
    ("DELETE", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): Rule(W, IndexFrom.store, database=True),
    ("GET", "/v1/vector_stores/{vector_store_id}/files/{file_id}/content"): Rule(R, IndexFrom.store, database=True),
    ("POST", "/v1/vector_stores/{vector_store_id}/file_batches"): Rule(W, IndexFrom.store, database=True),
    ("GET", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}"): Rule(R, IndexFrom.store, database=True),
    ("POST", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel"): Rule(W, IndexFrom.store, database=True),
    ("GET", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files"): Rule(R, IndexFrom.store, database=True),
    # OpenAI responses: file_search reads the stores its tools name; a stored response is its creator's.
    ("POST", "/v1/responses"): Rule(R, IndexFrom.tools, owned=True, llm=True),
    ("GET", "/v1/responses/{response_id}"): Rule(R, owned=True),
    ("DELETE", "/v1/responses/{response_id}"): Rule(R, owned=True),
    ("GET", "/v1/responses/{response_id}/input_items"): Rule(R, owned=True),
    # the MCP endpoint (streamable HTTP: POST messages, GET the server's stream, DELETE a session); its calls
    # are checked one by one (MCP_CALLS)
    ("POST", "/mcp"): Rule(R, metered=False, standby=False),
    ("GET", "/mcp"): Rule(R, metered=False, standby=False),
    ("DELETE", "/mcp"): Rule(R, metered=False, standby=False),
}

# MCP calls that read documents, by MCP method (and tool): each counts as one request and is audited.
# ``argument``: the index the call names (none on ``search``: every index the caller sees, each checked).
MCP_CALLS: dict[str, Rule] = {
    "tools/call search": Rule(R, IndexFrom.argument),
    "tools/call fetch": Rule(R, IndexFrom.argument),
    "tools/call list_indexes": Rule(R, IndexFrom.list),
    "resources/list": Rule(R, IndexFrom.list),
    "resources/read": Rule(R, IndexFrom.argument),
}

OPEN_PATHS = frozenset(path for (_method, path), rule in ROUTES.items() if rule.open)
# An open template ending in one parameter ("/ui/assets/{name}") opens the paths below its prefix, one level deep.
_OPEN_PREFIXES = tuple(path.partition("{")[0] for path in OPEN_PATHS if "{" in path)


def is_open(path: str) -> bool:
    """Whether a request path (or a route's template) needs no credentials."""
    if path in OPEN_PATHS:
        return True
    return any(path.startswith(prefix) and "/" not in path[len(prefix):] for prefix in _OPEN_PREFIXES)


def served_by_standby(method: str, rule: Rule) -> bool:
    """Whether a stand-by engine answers a route at once (ragengine.handover: a FAISS pod's replacement while
    the old process still holds the data folder) or holds it until the take-over. It answers what changes
    nothing and reads only what it loaded, read-only, from the folder (the indexes and their version books):
    the open routes, and GETs and ``query`` POSTs that touch no sessions' database. Every write waits, and so
    does everything kept in the sessions' database (sessions, files, stored responses: ``owned``; vector
    stores: ``database``), which the stand-by does not open: SQLite on the same volume, that the writer
    migrates at its start; and what only the writer's services answer (``standby=False``: MCP's sessions)."""
    if rule.open:
        return True
    return rule.standby and (method == "GET" or rule.query) and not (rule.owned or rule.database)


def rule_for(method: str, path: str) -> Rule:
    """The rule of a route (``path`` is its template). A missing entry is a programming error that
    ``uncovered`` catches when the app is built."""
    return ROUTES[(method.upper(), path)]


def uncovered(operations: Iterable[tuple[str, str]]) -> list[str]:
    """``METHOD path`` of every operation that has no rule (HEAD and OPTIONS are never routed to handlers)."""
    return sorted(f"{m.upper()} {p}" for m, p in operations
                  if m.upper() not in ("HEAD", "OPTIONS") and (m.upper(), p) not in ROUTES)
