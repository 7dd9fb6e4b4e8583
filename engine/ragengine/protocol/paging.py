"""Bounds shared by every paging and count parameter of the API.

An unbounded ``int`` query parameter lets a client send ``offset=10**22``, which reaches SQLite or
PostgreSQL as an out-of-range integer and fails there as a 500. Every offset is at most ``MAX_OFFSET``
(PostgreSQL's ``integer``, and what 32-bit clients can hold), so such input is a 4xx naming the parameter.
"""

from __future__ import annotations

MAX_OFFSET = 2**31 - 1
MAX_TEXT_LENGTH = 2**31 - 1
