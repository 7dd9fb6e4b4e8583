"""Server-side apply, get, list, delete and status patch: the one write path for children.

Everything goes through the `kubernetes` dynamic client (discovery-backed, no hand-built paths):
server-side apply with our field manager makes a repeat a no-op (no new resourceVersion, no
rollout) and leaves fields owned by others (an HPA's replicas, kubectl annotations) alone.
force_conflicts=True: the operator is the authority for the fields it sets.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from .. import constants as c

# The dynamic client's errors subclass ApiException: callers catch ApiException (status, body).
__all__ = ["ApiException", "delete", "get", "list_objects", "patch_status", "server_side_apply"]


def _resource(dyn: DynamicClient, api_version: str, kind: str) -> Any:
    return dyn.resources.get(api_version=api_version, kind=kind)


def server_side_apply(dyn: DynamicClient, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    res = _resource(dyn, obj["apiVersion"], obj["kind"])
    out = res.server_side_apply(body=obj, name=meta["name"], namespace=meta.get("namespace"),  # None: cluster-scoped
                                field_manager=c.FIELD_MANAGER, force_conflicts=True, _request_timeout=30)
    return out.to_dict()


def get(dyn: DynamicClient, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
    try:
        return _resource(dyn, api_version, kind).get(name=name, namespace=namespace, _request_timeout=30).to_dict()
    except NotFoundError:
        return None


def list_objects(dyn: DynamicClient, api_version: str, kind: str, namespace: str | None, selector: str,
                 field_selector: str | None = None) -> list[dict]:
    query: dict[str, Any] = {"label_selector": selector} if selector else {}
    if field_selector:
        query["field_selector"] = field_selector
    out = _resource(dyn, api_version, kind).get(namespace=namespace, _request_timeout=30, **query)
    return out.to_dict().get("items") or []


def delete(dyn: DynamicClient, api_version: str, kind: str, namespace: str | None, name: str,
           uid: str | None = None) -> bool:
    """Delete (foreground: pods go first); False when it was already gone.

    With `uid`, the API server deletes only that incarnation (a precondition), so an object that
    someone re-created under the same name since we looked is never taken.
    """
    body: dict[str, Any] = {"propagationPolicy": "Foreground"}
    if uid:
        body["preconditions"] = {"uid": uid}
    try:
        _resource(dyn, api_version, kind).delete(name=name, namespace=namespace, body=body, _request_timeout=30)
        return True
    except NotFoundError:
        return False


def patch_status(dyn: DynamicClient, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    res = _resource(dyn, c.API_VERSION, c.KIND).subresources["status"]
    out = res.patch(body={"status": status}, name=name, namespace=namespace,
                    content_type="application/merge-patch+json", _request_timeout=30)
    return out.to_dict()


def list_ragengines(dyn: DynamicClient) -> list[dict]:
    """Every RAGEngine the operator can see (the periodic resync's work list)."""
    return _resource(dyn, c.API_VERSION, c.KIND).get(_request_timeout=30).to_dict().get("items") or []
