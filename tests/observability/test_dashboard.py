"""The Grafana dashboard (charts/ragengine/dashboards/ragengine.json) plots metrics that exist: every
metric name in its queries is registered by the engine or the operator."""

from __future__ import annotations

import json
import re
from pathlib import Path

import prometheus_client

import ragengine.guardrails.metrics  # noqa: F401  (registers the guardrails metrics)
import ragengine_operator.metrics  # noqa: F401  (registers the operator's metrics, on the default registry)
from ragengine.metrics import REGISTRY

DASHBOARD = Path(__file__).resolve().parents[2] / "charts/ragengine/dashboards/ragengine.json"
NAME = re.compile(r"\b((?:ragengine|rag|llm)_[a-z_]+?)(?:_bucket|_count|_sum)?\b(?=[{\[\s)])")


def registered() -> set[str]:
    names = set()
    for registry in (REGISTRY, prometheus_client.REGISTRY):
        for family in registry.collect():
            names |= {family.name, f"{family.name}_total"}
    return names


def test_every_metric_in_the_dashboard_is_registered():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in NAME.findall(e)}
    assert len(used) >= 15, used  # the regex found the queries' metrics
    assert used <= registered(), sorted(used - registered())
