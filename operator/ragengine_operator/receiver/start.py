"""The push receiver's app as every replica serves it, when ``settings.receiver_port`` is set (the chart's
``receiver.enabled``): runtime.py mounts it in the side server (conversion/server.py) on that port, plain
HTTP, before leader election. It only *requests* syncs (an annotation on the RAGEngine, receiver/server.py),
so it needs no lease: the replica that leads, whose source syncer watches RAGEngines, runs them."""

from __future__ import annotations

from aiohttp import web
from kubernetes import client as k8s

from ..settings import OperatorSettings
from .kube import ApiLookup, annotator
from .server import Receiver, Throttle


def receiver_app(settings: OperatorSettings, api: k8s.ApiClient) -> web.Application:
    """``api``: the receiver's own client (kopf runs only where the replica leads)."""
    receiver = Receiver(ApiLookup(api), annotator(api), max_body=settings.receiver_max_body_bytes,
                        throttle=Throttle(settings.receiver_rate_per_namespace, settings.receiver_burst_per_namespace))
    return receiver.app()
