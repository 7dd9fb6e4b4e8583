"""How many tokens the engine may send to the API server for review: token buckets per client address and in
total, in memory (each replica has its own; the API server sees at most replicas x the total).

Only tokens the engine has never accepted cost a review from the budget (a cached principal's refresh does
not): an unauthenticated caller can make the engine ask the API server at most ``per_client_per_minute``
times a minute (after a burst of a sixth of it), and all such callers together at most ``per_minute``, so
JWT-shaped garbage can neither load the API server nor get the engine's own account throttled there. The
per-client buckets are kept for the ``MAX_CLIENTS`` most recent addresses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache

MAX_CLIENTS = 10_000


class ReviewThrottled(Exception):
    """Too many unknown tokens to review from this address, or from everyone, right now; retry after ``wait_s``."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message)
        self.wait_s = wait_s


@dataclass
class Bucket:
    """``capacity`` tokens, refilled at ``rate`` a second."""

    capacity: float
    rate: float
    level: float
    at: float

    def take(self, now: float) -> float:
        """0 when a token was taken; else the seconds until one is there."""
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now
        if self.level >= 1:
            self.level -= 1
            return 0.0
        return (1 - self.level) / self.rate


def _bucket(per_minute: int, now: float) -> Bucket:
    burst = max(1.0, per_minute / 6)  # ten seconds' worth at once
    return Bucket(burst, per_minute / 60, burst, now)


class ReviewBudget:
    def __init__(self, per_client_per_minute: int, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_client, self.per_minute, self.clock = per_client_per_minute, per_minute, clock
        self._total = _bucket(per_minute, clock())
        self._clients: LRUCache = LRUCache(maxsize=MAX_CLIENTS)

    def take(self, client: str | None) -> None:
        """Spend one review for ``client`` (its address; None: unknown, one shared bucket), or ReviewThrottled."""
        now = self.clock()
        key = client or "unknown"
        bucket = self._clients.get(key)
        if bucket is None:
            bucket = self._clients[key] = _bucket(self.per_client, now)
        wait = bucket.take(now)
        if wait:
            raise ReviewThrottled(f"too many new ServiceAccount tokens from {key} (at most {self.per_client} "
                                  "reviewed a minute per client address)", wait)
        wait = self._total.take(now)
        if wait:
            bucket.level = min(bucket.capacity, bucket.level + 1)  # not spent: nobody was asked
            raise ReviewThrottled(f"too many new ServiceAccount tokens (at most {self.per_minute} reviewed a "
                                  "minute in all)", wait)
