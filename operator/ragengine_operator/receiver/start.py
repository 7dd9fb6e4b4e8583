"""Start the push receiver when ``settings.receiver_port`` is set (the chart's ``receiver.enabled``).

It runs next to kopf (started from kopf's startup handler), and it only *requests* syncs (an annotation on
the RAGEngine, receiver/server.py): the replica that leads, whose source syncer watches RAGEngines, runs
them. So the receiver can as well move to a server every replica runs: nothing in it needs the lease.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from kubernetes.dynamic import DynamicClient

from .kube import ApiLookup, annotator
from .server import Receiver, Throttle, serve


async def start_receiver(dyn: DynamicClient, settings: Any) -> web.AppRunner | None:
    if not settings.receiver_port:
        return None
    receiver = Receiver(ApiLookup(dyn), annotator(dyn), max_body=settings.receiver_max_body_bytes,
                        throttle=Throttle(settings.receiver_rate_per_namespace, settings.receiver_burst_per_namespace))
    return await serve(receiver, settings.receiver_port)
