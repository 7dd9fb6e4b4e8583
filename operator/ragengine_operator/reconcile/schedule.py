"""When to reconcile a RAGEngine next. Pure: the clock and the random draw are arguments.

A healthy object is re-checked every `resync` seconds, spread by up to `jitter` of that period so
that hundreds of objects created together do not reconcile in lock-step. An object whose last
reconcile failed is retried with exponential backoff (base, 2x base, 4x base, ... capped), so a
child the API server keeps refusing costs one request every few minutes, not every 10 seconds.
"""

from __future__ import annotations

RETRY_BASE_SECONDS = 5.0
RETRY_MAX_SECONDS = 300.0


def backoff(failures: int, base: float = RETRY_BASE_SECONDS, cap: float = RETRY_MAX_SECONDS) -> float:
    """Delay before retry number `failures` (1 = first retry): base * 2**(failures-1), at most cap."""
    return min(cap, base * 2 ** max(0, failures - 1))


def next_due(now: float, failures: int, resync: float, jitter: float, draw: float) -> float:
    """The time of the next reconcile. draw in [0, 1) spreads the resync over [resync, resync*(1+jitter))."""
    if failures > 0:
        return now + backoff(failures)
    return now + resync * (1.0 + jitter * draw)
