"""The engine's metadata filters as SQL over a JSONB column, with every key and value bound.

Pure: ``to_sql(filter, column)`` returns a SQLAlchemy boolean expression that selects exactly the rows
whose metadata ``ragengine.retrieval.filters.matches`` accepts (a test runs both over the same cases):

- ``eq``: ``column -> key`` equals the value as JSON (so ``true`` is not ``1``, ``1`` equals ``1.0``), or,
  when the stored value is an array, the array contains it.
- ``ne`` / ``nin``: the negation, with a missing key counting as "not equal" (``coalesce(…, false)``).
- ``gt`` … ``lte``: only numbers against numbers and strings against strings (``CASE`` on
  ``jsonb_typeof`` first, so no cast ever sees another type); strings compare by code point
  (``COLLATE "C"``), as Python compares them.

- ``Acl`` (document ACLs): no ``acl`` key, or ``acl`` an array (of at most ``ACL_MAX`` entries) whose every
  entry is a string ``group:…`` / ``user:…`` of at most 512 characters (a constant jsonpath finds any
  other) and that contains one of the principal's entries (``@>``, each entry bound).

The seed built its filter by formatting values into a query string; here a key or value can never
change the statement, whatever it contains.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Numeric, Text, and_, case, cast, false, func, literal, not_, or_
from sqlalchemy.dialects.postgresql import JSONB, JSONPATH
from sqlalchemy.sql.elements import ColumnElement

from ragengine.retrieval.filters import ACL_KEY, ACL_MAX, Acl, Compound, Condition, Filter

_ORDER = {"gt": "__gt__", "gte": "__ge__", "lt": "__lt__", "lte": "__le__"}
# An entry that is not a well-formed ACL entry (access.acl.acl_entry_ok): not a string, too long, or neither
# "group:" nor "user:" followed by at least one character. Constant code, never built from values. Strict:
# lax mode would unwrap a nested array and judge its entries instead; the first test is never an error.
_BAD_ENTRY = ('strict $[*] ? (@.type() != "string" || !(@ like_regex "^(group|user):." flag "s")'
              ' || @ like_regex "^(.{171}){3}" flag "s")')  # 3 × 171 = 513 characters: too long


def to_sql(flt: Filter, column: Any) -> ColumnElement[bool]:
    if isinstance(flt, Acl):
        return _acl(flt, column)
    if isinstance(flt, Compound):
        parts = [to_sql(f, column) for f in flt.filters]
        return and_(*parts) if flt.op == "and" else or_(*parts)
    return _condition(flt, column)


def _json(value: Any) -> ColumnElement:
    return cast(literal(json.dumps(value)), JSONB)


def _eq(stored: Any, value: Any) -> ColumnElement[bool]:
    wanted = _json(value)
    is_array = func.jsonb_typeof(stored) == "array"
    contains = stored.op("@>", is_comparison=True)(func.jsonb_build_array(wanted))
    return func.coalesce(case((is_array, contains), else_=stored == wanted), false())


def _condition(c: Condition, column: Any) -> ColumnElement[bool]:
    stored = column.op("->")(literal(c.key))
    if c.op == "eq":
        return _eq(stored, c.value)
    if c.op == "ne":
        return not_(_eq(stored, c.value))
    if c.op == "in":
        return or_(*[_eq(stored, v) for v in c.value])
    if c.op == "nin":
        return not_(or_(*[_eq(stored, v) for v in c.value]))
    text = column.op("->>", return_type=Text)(literal(c.key))
    if isinstance(c.value, str):
        compared = getattr(text.collate("C"), _ORDER[c.op])(literal(c.value))
        return case((func.jsonb_typeof(stored) == "string", compared), else_=false())
    compared = getattr(cast(text, Numeric), _ORDER[c.op])(literal(c.value))
    return case((func.jsonb_typeof(stored) == "number", compared), else_=false())


def _acl(flt: Acl, column: Any) -> ColumnElement[bool]:
    stored = column.op("->")(literal(ACL_KEY))
    well_formed = and_(
        func.jsonb_typeof(stored) == "array",
        func.jsonb_array_length(case((func.jsonb_typeof(stored) == "array", stored), else_=_json([]))) <= ACL_MAX,
        not_(func.jsonb_path_exists(stored, cast(literal(_BAD_ENTRY), JSONPATH), _json({}), True)),  # silent
    )
    shares = or_(*[stored.op("@>", is_comparison=True)(func.jsonb_build_array(_json(t))) for t in flt.tokens]) \
        if flt.tokens else false()
    return or_(stored.is_(None), func.coalesce(and_(well_formed, shares), false()))
