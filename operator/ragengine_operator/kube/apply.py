"""Server-side apply, delete, status patch and events: the one write path for children.

Server-side apply with our field manager makes a repeat a no-op (no new resourceVersion, no
rollout) and leaves fields owned by others (HPA replicas, kubectl annotations) alone. force=True:
the operator is the authority for the fields it sets.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from .. import constants as c

PLURALS = {"Deployment": "deployments", "Service": "services", "PersistentVolumeClaim": "persistentvolumeclaims",
           "Pod": "pods", "Event": "events", c.KIND: c.PLURAL}


def path(api_version: str, kind: str, namespace: str, name: str | None = None, sub: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    p = f"{base}/namespaces/{namespace}/{PLURALS[kind]}"
    if name:
        p += f"/{name}"
    if sub:
        p += f"/{sub}"
    return p


def call(api: k8s.ApiClient, method: str, url: str, body: Any = None, content_type: str = "application/json",
         query: list[tuple[str, str]] | None = None) -> Any:
    """A raw REST call returning the decoded JSON; non-2xx raises ApiException (status, body)."""
    # dict bodies: the client serialises them as JSON for JSON and YAML content types alike.
    headers = {"Content-Type": content_type, "Accept": "application/json"}
    method, full_url, headers, body, _ = api.param_serialize(
        method=method, resource_path=url, query_params=query or [], header_params=headers, body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, full_url, header_params=headers, body=body, _request_timeout=30)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(http_resp=response)
    return json.loads(response.data) if response.data else None


def server_side_apply(api: k8s.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    url = path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    query = [("fieldManager", c.FIELD_MANAGER), ("force", "true")]
    return call(api, "PATCH", url, obj, "application/apply-patch+yaml", query)


def get(api: k8s.ApiClient, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return call(api, "GET", path(api_version, kind, namespace, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_objects(api: k8s.ApiClient, api_version: str, kind: str, namespace: str, selector: str) -> list[dict]:
    data = call(api, "GET", path(api_version, kind, namespace), query=[("labelSelector", selector)])
    return data.get("items") or []


def delete(api: k8s.ApiClient, api_version: str, kind: str, namespace: str, name: str) -> bool:
    """Delete (foreground: pods go first); False when it was already gone."""
    try:
        call(api, "DELETE", path(api_version, kind, namespace, name), {"propagationPolicy": "Foreground"})
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def patch_status(api: k8s.ApiClient, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    url = path(c.API_VERSION, c.KIND, namespace, name, "status")
    return call(api, "PATCH", url, {"status": status}, "application/merge-patch+json")


def post_event(api: k8s.ApiClient, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
    """A core/v1 Event on the RAGEngine (kubectl describe shows it)."""
    meta = owner["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid")},
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": c.FIELD_MANAGER},
        "reportingComponent": c.FIELD_MANAGER,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    call(api, "POST", path("v1", "Event", meta["namespace"]), event)
