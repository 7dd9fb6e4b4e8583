"""Rate limits per principal: requests and LLM tokens per minute, counted in the sessions' database.

The count is a sliding window over two fixed minutes: ``previous × (1 − elapsed/60) + current`` (the
previous minute's count weighted by how much of it still lies within the last 60 seconds). It never lets
more than the limit through in any minute-aligned window, and at most twice the limit in the worst
unaligned 60 seconds only if the previous minute's requests all came at its very end (the estimate
assumes them spread evenly). ``estimate`` and ``wait_s`` are pure; ``UsageCounter`` keeps the counts in
the ``access_usage`` table of the sessions' database (``conversations.models.UsageRow``):

- requests: an upsert that adds one only while the estimate stays within the limit (``ON CONFLICT DO
  UPDATE … WHERE``, atomic on PostgreSQL and SQLite), so replicas sharing a PostgreSQL share one limit,
  and a refused request is not counted (a client that retries after ``Retry-After`` gets through);
- LLM tokens: reserved before each LLM call and settled after it. A call can spend at most its prompt plus
  ``n × max_tokens``; ``reserve_tokens`` admits it only if that fits in what is left of the window, lowering
  ``max_tokens`` to what is left (``grant``) and refusing when not even the prompt and one token per choice
  fit, in the same conditional upsert as requests (so concurrent calls, on any replica, cannot together
  spend more than the limit: eight at once once spent 40,000 tokens of a 1,000 limit, issue 41). Once the
  LLM answered, ``settle_tokens`` replaces the reservation with what the upstream reports it spent.
  Each replica's clock picks the minute (Kubernetes nodes keep NTP time).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from sqlalchemy import Table, case, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine

WINDOW_S = 60.0


def estimate(previous: float, current: float, elapsed: float) -> float:
    """The sliding-window count ``elapsed`` seconds into the current minute."""
    return previous * max(0.0, 1.0 - elapsed / WINDOW_S) + current


def wait_s(previous: float, current: float, elapsed: float, limit: float, cost: float) -> float:
    """Seconds until ``cost`` more fits under ``limit`` (0: now), assuming nothing else is spent meanwhile."""
    if estimate(previous, current, elapsed) + cost <= limit:
        return 0.0
    if current + cost <= limit and previous > 0:  # later in this minute, once enough of the previous one aged out
        return WINDOW_S * (1.0 - (limit - current - cost) / previous) - elapsed
    if cost > limit:
        return math.inf
    # next minute: this minute's count becomes the previous one
    later = WINDOW_S * (1.0 - (limit - cost) / current) if current > 0 else 0.0
    return (WINDOW_S - elapsed) + max(0.0, later)


def grant(previous: float, current: float, elapsed: float, limit: float, prompt: int, n: int, ceiling: int) -> int:
    """``max_tokens`` per choice a call of ``prompt`` tokens and ``n`` choices may have now: its ``ceiling``,
    or less so that ``prompt + n × max_tokens`` fits in what is left of ``limit``; 0 when not even one token
    per choice fits."""
    left = limit - estimate(previous, current, elapsed) - prompt
    return max(0, min(ceiling, int(left // max(1, n))))


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(min(seconds, 3600.0))))


class UsageCounter:
    """``table``: the sessions' ``access_usage`` (``conversations.models.UsageRow.__table__``, created by their
    migrations), given by the app: access control sits below the conversations in the engine's layers."""

    def __init__(self, engine: Engine, table: Table, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.t = table.c
        self.table = table
        self.clock = clock
        self._insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert
        self._pruned_minute = -1

    def _now(self) -> tuple[int, float]:
        now = self.clock()
        minute = int(now // WINDOW_S)
        return minute, now - minute * WINDOW_S

    def _counts(self, conn, principal: str, minute: int) -> dict[int, tuple[int, int]]:
        rows = conn.execute(select(self.t.minute, self.t.requests, self.t.tokens)
                            .where(self.t.principal == principal, self.t.minute.in_((minute - 1, minute))))
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    def _prune(self, conn, minute: int) -> None:
        if self._pruned_minute != minute:  # at most once a minute per replica
            conn.execute(delete(self.table).where(self.t.minute < minute - 1))
            self._pruned_minute = minute

    def _take_request(self, principal: str, limit: int) -> float:
        minute, elapsed = self._now()
        with self.engine.begin() as conn:
            self._prune(conn, minute)
            counts = self._counts(conn, principal, minute)
            previous, current = counts.get(minute - 1, (0, 0))[0], counts.get(minute, (0, 0))[0]
            wait = wait_s(previous, current, elapsed, limit, 1)
            if wait > 0:
                return wait
            # The previous minute is closed: its weight is fixed, so the WHERE decides atomically.
            room = limit - previous * max(0.0, 1.0 - elapsed / WINDOW_S)
            insert = self._insert(self.table).values(principal=principal, minute=minute, requests=1, tokens=0)
            stmt = insert.on_conflict_do_update(
                index_elements=[self.t.principal, self.t.minute],
                set_={"requests": self.t.requests + 1},
                where=(self.t.requests + 1) <= room,
            ).returning(self.t.requests)
            if conn.execute(stmt).first() is not None:
                return 0.0
            counts = self._counts(conn, principal, minute)  # another replica took the last one meanwhile
            current = counts.get(minute, (0, 0))[0]
            return max(wait_s(previous, current, elapsed, limit, 1), 1.0)

    def _reserve_tokens(self, principal: str, limit: int, prompt: int, n: int, ceiling: int
                        ) -> tuple[int, int, float]:
        minute, elapsed = self._now()
        with self.engine.begin() as conn:
            for _attempt in range(3):  # another replica may take the room between the read and the upsert
                counts = self._counts(conn, principal, minute)
                previous, current = counts.get(minute - 1, (0, 0))[1], counts.get(minute, (0, 0))[1]
                granted = grant(previous, current, elapsed, limit, prompt, n, ceiling)
                if granted < 1:
                    return 0, minute, max(wait_s(previous, current, elapsed, limit, prompt + n), 1.0)
                cost = prompt + n * granted
                room = limit - previous * max(0.0, 1.0 - elapsed / WINDOW_S)
                insert = self._insert(self.table).values(principal=principal, minute=minute, requests=0, tokens=cost)
                stmt = insert.on_conflict_do_update(
                    index_elements=[self.t.principal, self.t.minute],
                    set_={"tokens": self.t.tokens + cost},
                    where=(self.t.tokens + cost) <= room,
                ).returning(self.t.tokens)
                if conn.execute(stmt).first() is not None:
                    return granted, minute, 0.0
            return 0, minute, 1.0

    def _settle_tokens(self, principal: str, minute: int, reserved: int, spent: int) -> None:
        change = spent - reserved
        if change > 0:  # spent more than reserved (a prompt estimate was low): counted in this minute
            self._add_tokens(principal, change)
        elif change < 0:  # give back what the call did not spend, in the minute it was reserved in
            left = self.t.tokens + change
            with self.engine.begin() as conn:
                conn.execute(self.table.update().where(self.t.principal == principal, self.t.minute == minute)
                             .values(tokens=case((left < 0, 0), else_=left)))

    def _tokens_wait(self, principal: str, limit: int) -> float:
        minute, elapsed = self._now()
        with self.engine.connect() as conn:
            counts = self._counts(conn, principal, minute)
        previous, current = counts.get(minute - 1, (0, 0))[1], counts.get(minute, (0, 0))[1]
        return wait_s(previous, current, elapsed, limit, 1)

    def _add_tokens(self, principal: str, tokens: int) -> None:
        minute, _ = self._now()
        with self.engine.begin() as conn:
            stmt = self._insert(self.table).values(principal=principal, minute=minute, requests=0, tokens=tokens)
            conn.execute(stmt.on_conflict_do_update(index_elements=[self.t.principal, self.t.minute],
                                                    set_={"tokens": self.t.tokens + tokens}))

    async def take_request(self, principal: str, limit: int) -> float:
        """Count one request of ``principal`` if it fits: 0.0; else the seconds to wait (nothing counted)."""
        return await asyncio.to_thread(self._take_request, principal, limit)

    async def tokens_wait(self, principal: str, limit: int) -> float:
        """0.0 while ``principal`` has LLM tokens left this minute; else the seconds to wait."""
        return await asyncio.to_thread(self._tokens_wait, principal, limit)

    async def reserve_tokens(self, principal: str, limit: int, prompt: int, n: int, ceiling: int
                             ) -> tuple[int, int, float]:
        """Reserve a call's tokens: ``(max_tokens granted, minute, 0.0)``, its cost ``prompt + n × granted``
        counted; or ``(0, minute, seconds to wait)`` with nothing counted."""
        return await asyncio.to_thread(self._reserve_tokens, principal, limit, prompt, n, ceiling)

    async def settle_tokens(self, principal: str, minute: int, reserved: int, spent: int) -> None:
        """Replace a reservation (``reserved`` tokens counted in ``minute``) by what the call ``spent``."""
        await asyncio.to_thread(self._settle_tokens, principal, minute, reserved, spent)

    async def add_tokens(self, principal: str, tokens: int) -> None:
        if tokens > 0:
            await asyncio.to_thread(self._add_tokens, principal, tokens)
