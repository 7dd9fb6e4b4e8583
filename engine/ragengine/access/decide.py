"""Allow or deny one request: principal + route rule + the index it names → a decision. Pure.

Contract:
- an open rule allows everyone (``principal`` may be None);
- no principal on a closed rule: 401 (the middleware answers it before routing; kept here for the table);
- an index the principal may not see: 404 with the same message (and ``param``) as a missing index, or
  as a missing vector store on the vector store routes, so existence is not revealed; on routes that
  create the index they name, 403 instead (the decision depends on the name only, so it reveals nothing
  either, and "no such index" would confuse a writer);
- the reserved conversations index (uploads of every session) is seen by admins only;
- a visible index but a role below the rule's: 403 naming the role needed;
- a role below the rule's on a route without an index: 403.

Sessions and uploads (``owned`` routes) belong to the principal that created them: another principal's, or
one made before access control (no owner), answers exactly like a missing one (404), except to admins; a
session is also hidden when its index is one the principal may not see (``session_visible``).
Documents: a non-admin sees a document only through its ACL (``document_acl``; admins see every document).
"""

from __future__ import annotations

from dataclasses import dataclass

from ragengine.access.acl import Acl
from ragengine.access.routes import IndexFrom, Rule
from ragengine.access.rules import Principal, Role

NEEDS = {Role.read: "read", Role.write: "write", Role.admin: "admin"}


@dataclass(frozen=True)
class Decision:
    allowed: bool
    status: int = 200
    reason: str = "allowed"  # a short token for metrics and audit lines
    message: str = ""
    param: str | None = None  # the request field that named the index (OpenAI's error ``param``)
    retry_after: str | None = None  # 429: whole seconds


ALLOW = Decision(True)


def missing_index_message(index: str) -> str:
    """The registry's own 404 message for an index that does not exist (stores/registry.py)."""
    return f"No such index: '{index}' exists."


def missing_store_message(store_id: str) -> str:
    """The vector store API's own 404 message for a store that does not exist (vectorstores/service.py)."""
    return f"No vector store found with id '{store_id}'."


# Where the index comes from → how its absence is worded, and the request field that named it.
_SCOPED = {IndexFrom.path: (missing_index_message, "index_name"), IndexFrom.body: (missing_index_message, "index_name"),
           IndexFrom.chat: (missing_index_message, "index_name"),
           IndexFrom.store: (missing_store_message, "vector_store_id"),
           IndexFrom.tools: (missing_store_message, "tools.vector_store_ids"),
           IndexFrom.argument: (missing_index_message, "index")}


def visible(principal: Principal, index: str, reserved: frozenset[str] = frozenset()) -> bool:
    """Whether ``principal`` may know that ``index`` exists (list filtering uses the same test)."""
    if index in reserved and principal.role < Role.admin:
        return False
    return principal.sees(index)


def decide(principal: Principal | None, rule: Rule, index: str | None, *,
           reserved: frozenset[str] = frozenset()) -> Decision:
    if rule.role is None:
        return ALLOW
    if principal is None:
        return Decision(False, 401, "unauthenticated", "Missing or invalid credentials.")
    if index is not None and rule.index in _SCOPED and not visible(principal, index, reserved):
        if rule.creates:
            return Decision(False, 403, "index_not_permitted",
                            f"'{principal.name}' may not create or write index '{index}'.")
        missing, param = _SCOPED[rule.index]
        return Decision(False, 404, "index_not_visible", missing(index), param)
    if principal.role < rule.role:
        what = f" on index '{index}'" if index is not None else ""
        return Decision(False, 403, "role",
                        f"'{principal.name}' has role {NEEDS[principal.role]}{what}; this needs {NEEDS[rule.role]}.")
    return ALLOW


def owns(principal: Principal, owner: str | None) -> bool:
    """Whether ``principal`` may use a session or upload created by ``owner`` (admins: everyone's)."""
    return principal.role >= Role.admin or (owner is not None and owner == principal.id)


def session_visible(principal: Principal, owner: str | None, index: str | None,
                    reserved: frozenset[str] = frozenset()) -> bool:
    """A session is the principal's own (or they are an admin) and its index, if any, is one they see."""
    return owns(principal, owner) and (index is None or visible(principal, index, reserved))


def owner_filter(principal: Principal) -> str | None:
    """What lists of sessions and uploads are restricted to: the principal's own, or (admin) no restriction."""
    return None if principal.role >= Role.admin else principal.id


def document_acl(principal: Principal) -> Acl | None:
    """The document-ACL filter of a principal (None for admins, who see every document)."""
    return None if principal.role >= Role.admin else Acl(principal.acl_tokens)
