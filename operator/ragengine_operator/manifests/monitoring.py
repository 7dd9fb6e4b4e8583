"""spec.observability.metrics -> one ServiceMonitor or PodMonitor per component (the Prometheus operator's CRDs).

Both scrape `/metrics` on the port named `http`: the engine's (open without its API key, engine/ragengine/
auth.py) and vLLM's (outside the /v1 paths its key guards). The NetworkPolicies admit
`monitoring.scrapeFrom` (manifests/inference.py, manifests/engine.py), so scraping works with them on.
"""

from __future__ import annotations

from typing import Any

from .. import constants as c
from ..spec import RAGEngineSpec
from .engine import engine_deployment_name
from .inference import inference_name
from .labels import Owner, metadata, selector

MONITORING_API = "monitoring.coreos.com/v1"
KINDS = ("ServiceMonitor", "PodMonitor")


def monitored(owner: Owner, spec: RAGEngineSpec) -> list[tuple[str, str]]:
    """(name, component) of each component that has metrics: the engine, and vLLM in model mode."""
    out = [(engine_deployment_name(owner), c.COMPONENT_ENGINE)]
    if spec.runs_vllm:
        out.append((inference_name(owner), c.COMPONENT_INFERENCE))
    return out


def monitor(owner: Owner, spec: RAGEngineSpec, name: str, component: str) -> dict[str, Any]:
    m = spec.observability.metrics
    assert m is not None
    meta = metadata(owner, name, component)
    meta["labels"] = {**(m.labels or {}), **meta["labels"]}  # ours win, as on the pods
    endpoint = {"port": "http", "path": "/metrics", "interval": m.interval}
    body: dict[str, Any] = {"selector": {"matchLabels": selector(owner, component)},
                            "namespaceSelector": {"matchNames": [owner.namespace]}}
    body["endpoints" if m.kind == "ServiceMonitor" else "podMetricsEndpoints"] = [endpoint]
    return {"apiVersion": MONITORING_API, "kind": m.kind, "metadata": meta, "spec": body}


def monitors(owner: Owner, spec: RAGEngineSpec) -> list[dict[str, Any]]:
    return [monitor(owner, spec, name, component) for name, component in monitored(owner, spec)]
