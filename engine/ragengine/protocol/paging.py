"""Bounds shared by every paging and count parameter of the API, and OpenAI's cursor pages.

An unbounded ``int`` query parameter lets a client send ``offset=10**22``, which reaches SQLite or
PostgreSQL as an out-of-range integer and fails there as a 500. Every offset is at most ``MAX_OFFSET``
(PostgreSQL's ``integer``, and what 32-bit clients can hold), so such input is a 4xx naming the parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

MAX_OFFSET = 2**31 - 1
MAX_TEXT_LENGTH = 2**31 - 1


def cursor_page(items: Sequence[T], id_of: Callable[[T], str], *, limit: int, order: str = "desc",
                after: str | None = None, before: str | None = None) -> tuple[list[T], bool]:
    """OpenAI's cursor pagination over ``items`` listed oldest first: the page in ``order`` ('asc' | 'desc'),
    starting past ``after`` or ending ahead of ``before`` (ids of listed items), and whether more items lie
    beyond it in the direction of travel. An unknown cursor is a ``KeyError`` naming it."""
    listed = list(items) if order == "asc" else list(reversed(items))
    ids = [id_of(i) for i in listed]
    start, end = 0, len(listed)
    if after is not None:
        if after not in ids:
            raise KeyError(after)
        start = ids.index(after) + 1
    if before is not None:
        if before not in ids:
            raise KeyError(before)
        end = ids.index(before)
    window = listed[start:end]
    if before is not None and after is None:  # walking back from `before`: the items nearest to it
        return window[-limit:], len(window) > limit
    return window[:limit], len(window) > limit


def list_object(data: list[dict], has_more: bool) -> dict:
    """OpenAI's list envelope: ``{"object": "list", "data", "first_id", "last_id", "has_more"}``."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}
