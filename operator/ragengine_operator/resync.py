"""The periodic safety net: one loop for the whole operator instead of a daemon per object.

A per-object kopf daemon or timer makes kopf put a finalizer on every RAGEngine, and then
`kubectl delete rag`, namespace deletion and CRD removal hang while the operator is down. Owner
references already clean up the children, so nothing needs a finalizer: this loop walks kopf's
in-memory index of RAGEngines and reconciles each one when it is due (reconcile/schedule.py:
resync with jitter when healthy, exponential backoff after a failure).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from .controller import Controller

log = logging.getLogger(__name__)
TICK_SECONDS = 1.0
SWEEP_SECONDS = 60.0  # the TokenReview bindings of deleted RAGEngines (Controller.sweep_bindings)


async def _one(controller: Controller, namespace: str, name: str, slots: asyncio.Semaphore) -> None:
    async with slots:
        try:
            await asyncio.to_thread(controller.reconcile_outside_handlers, namespace, name)
        except Exception as exc:  # the API server is down or refused a read: back off, keep looping
            log.warning("resync of %s/%s failed: %s", namespace, name, exc)
            controller.mark_failed(namespace, name)


async def resync_loop(controller: Controller, index: Iterable[tuple[str, str]], workers: int) -> None:
    slots = asyncio.Semaphore(workers)
    swept = 0.0
    while True:
        await asyncio.sleep(TICK_SECONDS)
        at = time.monotonic()
        if at - swept >= SWEEP_SECONDS:
            swept = at
            try:
                await asyncio.to_thread(controller.sweep_bindings)
            except Exception as exc:  # no list permission, API down: try again next time
                log.warning("sweeping TokenReview bindings failed: %s", exc)
        due = [key for key in list(index) if controller.is_due(*key, at)]
        if due:
            await asyncio.gather(*(_one(controller, ns, name, slots) for ns, name in due))
