"""Who pays for the LLM tokens a request spends: set once per request by ``access.enforce.authorize``, used by
the LLM client around every completion (chat, streams, reformulation, tool rounds), wherever it runs.

A context variable, because the tokens are spent deep inside services (a reformulation inside a session
message, a tool round in a task of its own) that should not carry the principal around for billing; tasks
started by the request inherit it. Only principals with a tokens-per-minute limit are metered.

Each call is **reserved** before it is sent (``reserve``): its prompt (estimated) plus ``n × max_tokens``,
counted at once against the principal's limit, atomically (``access.limits.UsageCounter.reserve_tokens``),
so concurrent requests cannot together spend more than the limit. A call without ``max_tokens`` may write
to the end of the model's window, so that is what it reserves; when less is left this minute, its
``max_tokens`` is lowered to what is left (the answer then ends with ``finish_reason: length``), and when
not even its prompt fits, it is refused (429 with ``Retry-After``). After the call, ``settle`` replaces the
reservation with what it spent (the upstream's ``usage``, else an estimate), in a task of its own so a
client that disconnects mid-stream is still charged.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ragengine.access.limits import retry_after
from ragengine.errors import RateLimited

log = logging.getLogger("ragengine.access")


@dataclass(frozen=True)
class Meter:
    principal: str  # Principal.id
    counter: Any  # access.limits.UsageCounter
    limit: int  # LLM tokens per minute


@dataclass(frozen=True)
class Hold:
    """One call's reservation: ``reserved`` tokens counted in ``minute``."""

    meter: Meter
    minute: int
    reserved: int


_METER: ContextVar[Meter | None] = ContextVar("ragengine_llm_meter", default=None)
_CHARGES: set[asyncio.Task] = set()


def bill_to(meter: Meter | None) -> None:
    _METER.set(meter)


def metered() -> bool:
    """Whether the current request's LLM calls are reserved and settled (its principal has a token limit)."""
    return _METER.get() is not None


def stated_max_tokens(payload: dict[str, Any]) -> tuple[str, int | None]:
    """The field that caps the answer (``max_completion_tokens`` when given, else ``max_tokens``) and its value."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return name, value
    return "max_tokens", None


async def reserve(payload: dict[str, Any], prompt: int, window: int) -> tuple[dict[str, Any], Hold | None]:
    """Reserve the call ``payload`` (``prompt``: its estimated prompt tokens; ``window``: the model's context
    window) for the current request's principal. Returns the payload to send (``max_tokens`` lowered to what
    is left, when less is) and the hold to settle; raises ``RateLimited`` when nothing is left."""
    meter = _METER.get()
    if meter is None:
        return payload, None
    n = payload.get("n")
    n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    field, stated = stated_max_tokens(payload)
    ceiling = stated if stated is not None else max(1, window - prompt)
    granted, minute, wait = await meter.counter.reserve_tokens(meter.principal, meter.limit, prompt, n, ceiling)
    if granted < 1:
        name = meter.principal.split(":", 1)[-1]
        raise RateLimited(f"'{name}' has too few of its {meter.limit} LLM tokens per minute left for this request "
                          f"(about {prompt} tokens of prompt); retry in {retry_after(wait)} s.",
                          headers={"Retry-After": retry_after(wait)})
    if stated is None or granted < stated:
        payload = {**payload, field: granted}
    return payload, Hold(meter, minute, prompt + n * granted)


def settle(hold: Hold | None, spent: int) -> None:
    """Replace ``hold``'s reservation by the tokens the call ``spent`` (no-op without a hold)."""
    if hold is None:
        return

    async def write() -> None:
        try:
            await hold.meter.counter.settle_tokens(hold.meter.principal, hold.minute, hold.reserved, max(0, spent))
        except Exception as exc:  # the answer went out; a lost charge must not turn it into an error
            log.warning("could not settle %d LLM tokens of %s: %s", spent, hold.meter.principal, exc)

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a stream closed by the garbage collector after its loop ended: the reservation stays
        return
    task = loop.create_task(write())
    _CHARGES.add(task)
    task.add_done_callback(_CHARGES.discard)


async def settled() -> None:
    """Wait for the charges written so far (tests; shutdown)."""
    while _CHARGES:
        await asyncio.gather(*list(_CHARGES), return_exceptions=True)
