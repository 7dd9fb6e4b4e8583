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
  checked, the first the caller may not see decides.

``creates`` marks routes that may create the index they name: a name outside the caller's patterns is
then 403 (nothing exists to hide), where on other routes it is 404, the same as a missing index.
``open`` routes (the kubelet's probes, Prometheus) need no credentials and must reveal no documents.
``llm`` marks routes that may call the LLM: a principal over its tokens-per-minute limit gets 429 there
(requests per minute are counted on every route that needs credentials).
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


@dataclass(frozen=True)
class Rule:
    role: Role | None  # None: open to everyone, no credentials
    index: IndexFrom = IndexFrom.none
    owned: bool = False  # sessions / files: the store shows a caller only their own (admin: everyone's)
    creates: bool = False
    llm: bool = False  # may spend LLM tokens (tokens-per-minute limits apply)

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
    ("POST", "/retrieve"): Rule(R, IndexFrom.body),
    # index versions (re-index, rollback) and export / import: an export holds every document whatever its ACL,
    # so only an admin (who sees every document) may take one
    ("POST", "/indexes/{index_name}/reindex"): Rule(W, IndexFrom.path),
    ("GET", "/indexes/{index_name}/reindex"): Rule(W, IndexFrom.path),
    ("GET", "/indexes/{index_name}/versions"): Rule(W, IndexFrom.path),
    ("POST", "/indexes/{index_name}/versions/{version}/activate"): Rule(A, IndexFrom.path),
    ("DELETE", "/indexes/{index_name}/versions/{version}"): Rule(A, IndexFrom.path),
    ("GET", "/indexes/{index_name}/export"): Rule(A, IndexFrom.path),
    ("POST", "/indexes/{index_name}/import"): Rule(W, IndexFrom.path, creates=True),
    # OpenAI-compatible
    ("POST", "/v1/chat/completions"): Rule(R, IndexFrom.chat, llm=True),
    ("GET", "/v1/models"): Rule(R, IndexFrom.list),
    # conversations
    ("POST", "/v1/chat/reformulate"): Rule(R, llm=True),
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
    ("GET", "/v1/vector_stores"): Rule(R, IndexFrom.list),
    ("POST", "/v1/vector_stores"): Rule(W, IndexFrom.body, creates=True),
    ("GET", "/v1/vector_stores/{vector_store_id}"): Rule(R, IndexFrom.store),
    ("POST", "/v1/vector_stores/{vector_store_id}"): Rule(W, IndexFrom.store),
    ("DELETE", "/v1/vector_stores/{vector_store_id}"): Rule(A, IndexFrom.store),
    ("POST", "/v1/vector_stores/{vector_store_id}/search"): Rule(R, IndexFrom.store, llm=True),  # rewrite_query
    ("GET", "/v1/vector_stores/{vector_store_id}/files"): Rule(R, IndexFrom.store),
    ("POST", "/v1/vector_stores/{vector_store_id}/files"): Rule(W, IndexFrom.store),
    ("GET", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): Rule(R, IndexFrom.store),
    ("POST", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): Rule(W, IndexFrom.store),
    ("DELETE", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): Rule(W, IndexFrom.store),
    ("GET", "/v1/vector_stores/{vector_store_id}/files/{file_id}/content"): Rule(R, IndexFrom.store),
    ("POST", "/v1/vector_stores/{vector_store_id}/file_batches"): Rule(W, IndexFrom.store),
    ("GET", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}"): Rule(R, IndexFrom.store),
    ("POST", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel"): Rule(W, IndexFrom.store),
    ("GET", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files"): Rule(R, IndexFrom.store),
    # OpenAI responses: file_search reads the stores its tools name; a stored response is its creator's.
    ("POST", "/v1/responses"): Rule(R, IndexFrom.tools, owned=True, llm=True),
    ("GET", "/v1/responses/{response_id}"): Rule(R, owned=True),
    ("DELETE", "/v1/responses/{response_id}"): Rule(R, owned=True),
    ("GET", "/v1/responses/{response_id}/input_items"): Rule(R, owned=True),
}

OPEN_PATHS = frozenset(path for (_method, path), rule in ROUTES.items() if rule.open)


def rule_for(method: str, path: str) -> Rule:
    """The rule of a route (``path`` is its template). A missing entry is a programming error that
    ``uncovered`` catches when the app is built."""
    return ROUTES[(method.upper(), path)]


def uncovered(operations: Iterable[tuple[str, str]]) -> list[str]:
    """``METHOD path`` of every operation that has no rule (HEAD and OPTIONS are never routed to handlers)."""
    return sorted(f"{m.upper()} {p}" for m, p in operations
                  if m.upper() not in ("HEAD", "OPTIONS") and (m.upper(), p) not in ROUTES)
