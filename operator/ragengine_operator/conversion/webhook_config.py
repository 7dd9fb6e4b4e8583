"""The CRD's spec.conversion.webhook stanza: one builder for the generated CRD (hack/gen_crds.py), the operator
that keeps it in step with its Service and CA (crd.py), and the tests that point it at a webhook of theirs."""

from __future__ import annotations

import base64
from typing import Any

PATH = "/convert"
SERVICE_PORT = 443
# What the committed crds/ file names (the chart installed as release "ragengine" in ragengine-system); the
# chart's copy names its release's Service, and an operator with webhook_service set rewrites it to its own.
DEFAULT_SERVICE_NAMESPACE = "ragengine-system"
DEFAULT_SERVICE_NAME = "ragengine-webhook"


def client_config(namespace: str | None = None, name: str | None = None, *, url: str | None = None,
                  ca_pem: bytes | None = None) -> dict[str, Any]:
    """A service reference (the API server dials the Service) or a URL (a webhook outside the cluster)."""
    config: dict[str, Any] = (
        {"url": url} if url is not None else
        {"service": {"namespace": namespace, "name": name, "path": PATH, "port": SERVICE_PORT}})
    if ca_pem:
        config["caBundle"] = base64.b64encode(ca_pem).decode()
    return config


def crd_webhook(namespace: str, name: str) -> dict[str, Any]:
    """spec.conversion.webhook: ConversionReview v1 only (what the operator answers)."""
    return {"conversionReviewVersions": ["v1"], "clientConfig": client_config(namespace, name)}
