"""Metadata filters: OpenAI-style structured filters, parsed once into a tree and evaluated as values.

Grammar (OpenAI vector-store ``filters``)::

    {"type": "eq"|"ne"|"gt"|"gte"|"lt"|"lte"|"in"|"nin", "key": str, "value": ...}
    {"type": "and"|"or", "filters": [<filter>, ...]}

Semantics, chosen to be unsurprising:
- ``eq``: equal; when the metadata value is a list, "the list contains the value" (tags).
- ``ne``/``nin``: the negation of ``eq``/``in``; a missing key counts as "not equal".
- ``gt``/``gte``/``lt``/``lte``: numbers compare with numbers, strings with strings (ISO dates sort
  correctly); any other pairing (or a missing key) does not match.
- ``in``: the metadata value is one of the listed values (or, for list metadata, shares one).
- ``true`` is not ``1``: booleans only equal booleans.
KAITO's ``metadata_filter`` (a flat dict, exact match, AND) maps onto ``and`` of ``eq``.

Document ACLs (access control) add one node clients cannot write, ``Acl(tokens)``: a document is visible
when its metadata has no ``acl`` key, or when ``acl`` is a well-formed list (``ACL_MAX`` entries at most, each
a string ``group:<g>`` or ``user:<name>``) sharing an entry with ``tokens``. Anything else under ``acl``
(a string, ``null``, a number, a list with one bad entry, an unknown prefix) hides the document from every
caller it is applied to: fail closed (the grammar: ``access.acl``). Each store selects exactly what
``matches`` selects, before top-k.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ragengine.access.acl import ACL_KEY, ACL_MAX, Acl, acl_allows  # noqa: F401  (re-exported)
from ragengine.errors import BadRequest

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_DEPTH = 8
MAX_NODES = 256
MAX_LIST = 1024

Scalar = str | int | float | bool


@dataclass(frozen=True)
class Condition:
    op: str
    key: str
    value: Any


@dataclass(frozen=True)
class Compound:
    op: str
    filters: tuple


Filter = Condition | Compound | Acl


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and not (isinstance(value, float) and value != value)


def parse_filters(data: Any) -> Filter:
    """Validate and parse a filter dict; raises BadRequest naming what is wrong."""
    count = [0]
    return _parse(data, "filters", 0, count)


def _parse(data: Any, where: str, depth: int, count: list[int]) -> Filter:
    count[0] += 1
    if count[0] > MAX_NODES:
        raise BadRequest(f"Invalid filters: more than {MAX_NODES} conditions.")
    if depth > MAX_DEPTH:
        raise BadRequest(f"Invalid filters: nested deeper than {MAX_DEPTH} levels.")
    if not isinstance(data, dict):
        raise BadRequest(f"Invalid filters at {where}: expected an object, got {type(data).__name__}.")
    kind = data.get("type")
    if kind in COMPOUNDS:
        extra = set(data) - {"type", "filters"}
        subs = data.get("filters")
        if extra:
            raise BadRequest(f"Invalid filters at {where}: unexpected field(s) {sorted(extra)} in '{kind}'.")
        if not isinstance(subs, list) or not subs:
            raise BadRequest(f"Invalid filters at {where}: '{kind}' needs a non-empty 'filters' list.")
        return Compound(kind, tuple(_parse(s, f"{where}.filters[{i}]", depth + 1, count) for i, s in enumerate(subs)))
    if kind not in COMPARISONS:
        raise BadRequest(
            f"Invalid filters at {where}: unknown type {kind!r}; use one of {', '.join(COMPARISONS + COMPOUNDS)}."
        )
    extra = set(data) - {"type", "key", "value"}
    if extra:
        raise BadRequest(f"Invalid filters at {where}: unexpected field(s) {sorted(extra)} in '{kind}'.")
    key = data.get("key")
    if not isinstance(key, str) or not key:
        raise BadRequest(f"Invalid filters at {where}: '{kind}' needs a non-empty string 'key'.")
    if "value" not in data:
        raise BadRequest(f"Invalid filters at {where}: '{kind}' needs a 'value'.")
    value = data["value"]
    if kind in ("in", "nin"):
        if not isinstance(value, list) or not value or len(value) > MAX_LIST:
            raise BadRequest(f"Invalid filters at {where}: '{kind}' needs a list of 1 to {MAX_LIST} values.")
        if not all(_is_scalar(v) for v in value):
            raise BadRequest(f"Invalid filters at {where}: '{kind}' values must be strings, numbers or booleans.")
        return Condition(kind, key, tuple(value))
    if kind in ("gt", "gte", "lt", "lte"):
        if not _is_scalar(value) or isinstance(value, bool):
            raise BadRequest(f"Invalid filters at {where}: '{kind}' needs a number or string value.")
        return Condition(kind, key, value)
    if not _is_scalar(value):
        raise BadRequest(f"Invalid filters at {where}: '{kind}' needs a string, number or boolean value.")
    return Condition(kind, key, value)


def from_metadata_filter(data: Any) -> Filter | None:
    """KAITO ``metadata_filter`` (flat dict, exact match, AND) → filter tree; None when empty."""
    if data is None:
        return None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise BadRequest("Invalid metadata filter format. Must be a valid JSON string.") from exc
    if not isinstance(data, dict):
        raise BadRequest("Invalid metadata filter format. Must be a JSON object.")
    if not data:
        return None
    conds = []
    for key, value in data.items():
        if not (_is_scalar(value) or value is None):
            raise BadRequest(f"Invalid metadata filter: value for {key!r} must be a string, number or boolean.")
        conds.append(Condition("eq", key, value))
    return conds[0] if len(conds) == 1 else Compound("and", tuple(conds))


def combine(*filters: Filter | None) -> Filter | None:
    present = tuple(f for f in filters if f is not None)
    if not present:
        return None
    return present[0] if len(present) == 1 else Compound("and", present)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _contains(meta: Any, value: Any) -> bool:
    if isinstance(meta, list):
        return any(_equal(m, value) for m in meta)
    return _equal(meta, value)


def _order(meta: Any, value: Any) -> int | None:
    numeric = (int, float)
    if isinstance(meta, bool) or isinstance(value, bool):
        return None
    if isinstance(meta, numeric) and isinstance(value, numeric):
        return (meta > value) - (meta < value)
    if isinstance(meta, str) and isinstance(value, str):
        return (meta > value) - (meta < value)
    return None


def matches(flt: Filter | None, metadata: dict | None) -> bool:
    if flt is None:
        return True
    metadata = metadata or {}
    if isinstance(flt, Acl):
        return acl_allows(metadata, flt.tokens)
    if isinstance(flt, Compound):
        if flt.op == "and":
            return all(matches(f, metadata) for f in flt.filters)
        return any(matches(f, metadata) for f in flt.filters)
    present = flt.key in metadata
    meta = metadata.get(flt.key)
    op = flt.op
    if op == "eq":
        return present and _contains(meta, flt.value)
    if op == "ne":
        return not (present and _contains(meta, flt.value))
    if op == "in":
        return present and any(_contains(meta, v) for v in flt.value)
    if op == "nin":
        return not (present and any(_contains(meta, v) for v in flt.value))
    if not present:
        return False
    cmp = _order(meta, flt.value)
    if cmp is None:
        return False
    return {"gt": cmp > 0, "gte": cmp >= 0, "lt": cmp < 0, "lte": cmp <= 0}[op]
