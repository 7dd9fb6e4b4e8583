"""Who pays for the LLM tokens a request spends: set once per request by ``access.enforce.authorize``, read by
the LLM client after every completion (chat, streams, reformulation, tool rounds), wherever it runs.

A context variable, because the tokens are spent deep inside services (a reformulation inside a session
message, a tool round in a task of its own) that should not carry the principal around for billing; tasks
started by the request inherit it. Only principals with a tokens-per-minute limit are metered; the charge
is written in a task of its own so a client that disconnects mid-stream is still charged.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("ragengine.access")


@dataclass(frozen=True)
class Meter:
    principal: str  # Principal.id
    counter: Any  # access.limits.UsageCounter


_METER: ContextVar[Meter | None] = ContextVar("ragengine_llm_meter", default=None)
_CHARGES: set[asyncio.Task] = set()


def bill_to(meter: Meter | None) -> None:
    _METER.set(meter)


def charge(tokens: int) -> None:
    """Add ``tokens`` to the current request's principal (no-op when nobody is metered)."""
    meter = _METER.get()
    if meter is None or tokens <= 0:
        return

    async def write() -> None:
        try:
            await meter.counter.add_tokens(meter.principal, tokens)
        except Exception as exc:  # the answer went out; a lost charge must not turn it into an error
            log.warning("could not record %d LLM tokens of %s: %s", tokens, meter.principal, exc)

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a stream closed by the garbage collector after its loop ended: nothing to write with
        return
    task = loop.create_task(write())
    _CHARGES.add(task)
    task.add_done_callback(_CHARGES.discard)


async def settled() -> None:
    """Wait for the charges written so far (tests; shutdown)."""
    while _CHARGES:
        await asyncio.gather(*list(_CHARGES), return_exceptions=True)
