"""The document-ACL grammar: what ``acl`` in a document's metadata means. Pure.

A document is visible to a principal when its metadata has no ``acl`` key, or when ``acl`` is a well-formed
list (``ACL_MAX`` entries at most, each a string ``group:<g>`` or ``user:<name>`` of at most 512 characters)
sharing an entry with the principal's (``Principal.acl_tokens``). Anything else under ``acl`` hides the
document (fail closed). ``Acl(tokens)`` is the filter node that carries this into retrieval: every store
translates it (``retrieval.filters``, ``stores/postgres/filters.py``, ``stores/milvus.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACL_KEY = "acl"
ACL_PREFIXES = ("group:", "user:")
ACL_MAX = 256  # entries; the jsonpath and expression translations assume no more


@dataclass(frozen=True)
class Acl:
    """Visible to a principal whose ACL entries are ``tokens`` (sorted, e.g. ``("group:ops", "user:app-a")``)."""

    tokens: tuple[str, ...]


def acl_entry_ok(entry: Any) -> bool:
    return isinstance(entry, str) and len(entry) <= 512 and any(
        entry.startswith(p) and len(entry) > len(p) for p in ACL_PREFIXES)


def acl_problem(value: Any) -> str | None:
    """Why ``value`` is not a well-formed ``acl`` (None when it is); a malformed one hides its document."""
    if not isinstance(value, list):
        return f"'acl' must be a list of 'group:<g>' / 'user:<name>' strings, not {type(value).__name__}"
    if len(value) > ACL_MAX:
        return f"'acl' has more than {ACL_MAX} entries"
    bad = [e for e in value if not acl_entry_ok(e)]
    if bad:
        return f"'acl' entry {bad[0]!r} is not 'group:<g>' or 'user:<name>'"
    return None


def acl_allows(metadata: dict, tokens: tuple[str, ...]) -> bool:
    if ACL_KEY not in metadata:
        return True
    value = metadata[ACL_KEY]
    return acl_problem(value) is None and any(t in value for t in tokens)
