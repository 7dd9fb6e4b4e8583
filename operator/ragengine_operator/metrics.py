"""Prometheus metrics, named like controller-runtime's so existing dashboards read them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILE_TOTAL = Counter(
    "ragengine_operator_reconcile_total", "Reconciles of RAGEngines, by result.", ["result"]
)
RECONCILE_ERRORS = Counter(
    "ragengine_operator_reconcile_errors_total", "Failed reconciles, by reason.", ["reason"]
)
RECONCILE_TIME = Histogram(
    "ragengine_operator_reconcile_time_seconds", "Duration of one reconcile (apply + observe + status).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
STATUS_WRITES = Counter("ragengine_operator_status_writes_total", "Status patches written.")
# One per sync or prune a worker ran (not the ones skipped as up to date), by outcome (ok, failed); the
# Grafana dashboard's source sync panel (charts/ragengine/dashboards).
# Leader election and the conversion webhook (runtime.py, conversion/): every replica serves /metrics.
LEADER = Gauge("ragengine_operator_leader", "1 while this replica holds the Lease and runs the reconciles.")
CONVERSIONS = Counter("ragengine_operator_conversion_reviews_total", "ConversionReviews answered, by result.", ["result"])
SOURCE_SYNCS = Counter("ragengine_operator_source_syncs_total", "Source syncs and prunes run by a worker, by action and "
                       "outcome.", ["action", "outcome"])

# The push receiver (receiver/server.py), by the webhook's type (github, gitlab, generic; unknown before the
# source is known) and outcome: accepted, ignored, bad_signature, stale, replay, unknown, throttled, too_large,
# unavailable (the API server did not answer: the sender retries).
WEBHOOK_REQUESTS = Counter("ragengine_operator_webhook_requests_total", "Webhook requests to the push receiver, by "
                           "type and outcome.", ["type", "outcome"])


@contextmanager
def track() -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    except Exception as exc:
        RECONCILE_TOTAL.labels(result="error").inc()
        RECONCILE_ERRORS.labels(reason=type(exc).__name__).inc()
        raise
    else:
        RECONCILE_TOTAL.labels(result="success").inc()
    finally:
        RECONCILE_TIME.observe(time.perf_counter() - start)


def serve(port: int) -> None:
    if port:
        start_http_server(port)
