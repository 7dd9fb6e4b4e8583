"""A source sync's trace: the operator's span for one sync or prune, continued by the worker, and by the
engine's ingestion through the worker's HTTP calls (W3C ``traceparent``). docs/observability.md.

Contract:

- ``operator_span(config, request, namespace, name)``: a ``source_sync`` span exported where the RAGEngine's
  ``spec.observability.tracing`` says (``config``: its endpoint, protocol and sampling ratio; None: no
  span, the request unchanged). Yields the request with the span's ``traceparent`` and ``config`` in it,
  so the worker (a Job or a subprocess, with an empty environment) exports to the same place.
- ``worker_span(request, client)``: in the worker, a ``sync_worker`` span, child of the operator's, and a
  client span per request of ``client`` (the engine client) carrying ``traceparent``; exported before the
  worker exits. Nothing without a traceparent in the request.
- One TracerProvider per distinct ``config`` in the operator, kept for the process's life.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from ragengine.observability import tracing
from ragengine.observability.tracing import Tracing

from .protocol import SyncRequest

TracingConfig = tuple[str, str, float]  # endpoint, protocol, sampling ratio
_OPERATOR: dict[TracingConfig, Tracing] = {}


def config_of(spec: Any) -> TracingConfig | None:
    """spec.observability.tracing (a TracingSpec or None) as a hashable config."""
    return None if spec is None else (spec.endpoint, spec.protocol, spec.sampling_ratio)


def _tracing(config: TracingConfig, service_name: str) -> Tracing:
    endpoint, protocol, ratio = config
    return Tracing.to(endpoint, protocol=protocol, sampling_ratio=ratio, service_name=service_name)


def _attributes(request: SyncRequest) -> dict[str, Any]:
    return {"source.name": request.name, "source.action": request.action, "index": request.index,
            "source.known_revision": request.known_revision}


@contextmanager
def operator_span(config: TracingConfig | None, request: SyncRequest, namespace: str,
                  name: str) -> Iterator[SyncRequest]:
    """``namespace`` / ``name``: the RAGEngine's (the span's attributes)."""
    if config is None:
        yield request
        return
    if config not in _OPERATOR:
        _OPERATOR[config] = _tracing(config, "ragengine-operator")
    token = tracing.activate(_OPERATOR[config])
    try:
        with tracing.stage("source_sync", **{"k8s.namespace.name": namespace, "ragengine.name": name},
                           **_attributes(request)) as span:
            carrier: dict[str, str] = {}
            if span.is_recording():
                from opentelemetry.propagate import inject

                inject(carrier)
            yield replace(request, traceparent=carrier.get("traceparent"), tracing=list(config))
    finally:
        tracing.deactivate(token)


def result_attributes(result: Any) -> dict[str, Any]:
    """A SyncResult as span attributes: counts and the revision, never document text."""
    return {"sync.ok": result.ok, "sync.written": result.written, "sync.documents": result.documents,
            "sync.skipped": result.skipped, "sync.revision": result.revision}


def record(span: Any, result: Any) -> None:
    tracing.annotate(span, **result_attributes(result))


@contextmanager
def worker_span(request: SyncRequest, client: Any) -> Iterator[Any]:
    if not request.traceparent or not request.tracing:
        yield None
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    endpoint, protocol, ratio = request.tracing
    worker = _tracing((str(endpoint), str(protocol), float(ratio)), "ragengine-sync")
    parent = TraceContextTextMapPropagator().extract({"traceparent": request.traceparent})
    tracing.instrument(client, worker)
    token = tracing.activate(worker)
    try:
        with tracing.stage("sync_worker", parent=parent, **_attributes(request)) as span:
            yield span
    finally:
        tracing.deactivate(token)
        worker.shutdown()  # the process ends next: export now


def flush() -> None:
    """Export the operator's finished sync spans now (its shutdown; the tests)."""
    for provider in _OPERATOR.values():
        provider.flush()
