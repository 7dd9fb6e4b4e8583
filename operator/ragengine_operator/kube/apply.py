"""Server-side apply, get, list, delete and status patch: the one write path for children.

Everything goes through the `kubernetes` dynamic client (discovery-backed, no hand-built paths):
server-side apply with our field manager makes a repeat a no-op (no new resourceVersion, no
rollout) and leaves fields owned by others (an HPA's replicas, kubectl annotations) alone.
force_conflicts=True: the operator is the authority for the fields it sets.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from .. import constants as c

# The dynamic client's errors subclass ApiException: callers catch ApiException (status, body).
__all__ = ["ApiException", "api_message", "delete", "get", "get_metadata", "list_objects", "patch_status", "secret_type",
           "served_kinds", "server_side_apply"]
# Reads that leave an object's content on the server: a Secret's metadata (uid, resourceVersion,
# owners) or its type are all the operator needs of the Secrets it does not create.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"


def api_message(exc: ApiException) -> str:
    """The API server's own reason (its Status message), else the HTTP status line."""
    try:
        return json.loads(exc.body or "{}").get("message") or f"{exc.status} {exc.reason}"
    except (ValueError, AttributeError, TypeError):
        return f"{exc.status} {exc.reason}"


def _resource(dyn: DynamicClient, api_version: str, kind: str) -> Any:
    return dyn.resources.get(api_version=api_version, kind=kind)


def served_kinds(dyn: DynamicClient, api_version: str) -> frozenset[str]:
    """The kinds the API server serves in a group version (an add-on's CRDs may be absent: none): one GET.
    Not the dynamic client's discovery, which drops its whole cache on every miss."""
    try:
        listing = dyn.request("GET", f"/apis/{api_version}", _request_timeout=30)
    except NotFoundError:
        return frozenset()
    return frozenset(str(r.get("kind")) for r in (listing.to_dict().get("resources") or []))


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


def get_metadata(dyn: DynamicClient, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """{"kind", "metadata"} of the object without its content (for a Secret: no data), or None."""
    try:
        out = _resource(dyn, api_version, kind).get(name=name, namespace=namespace, _request_timeout=30,
                                                    header_params={"Accept": METADATA_ONLY})
    except NotFoundError:
        return None
    return {"kind": kind, "metadata": out.to_dict().get("metadata") or {}}


def secret_type(dyn: DynamicClient, namespace: str, name: str) -> str | None:
    """A Secret's type (the server's table row), its data never sent; None when it does not exist."""
    try:
        table = _resource(dyn, "v1", "Secret").get(name=name, namespace=namespace, _request_timeout=30,
                                                   header_params={"Accept": TABLE}).to_dict()
    except NotFoundError:
        return None
    columns = [col.get("name") for col in table.get("columnDefinitions") or []]
    rows = table.get("rows") or []
    if "Type" not in columns or not rows:
        return None
    return str(rows[0]["cells"][columns.index("Type")])


def list_objects(dyn: DynamicClient, api_version: str, kind: str, namespace: str | None, selector: str,
                 field_selector: str | None = None) -> list[dict]:
    query: dict[str, Any] = {"label_selector": selector} if selector else {}
    if field_selector:
        query["field_selector"] = field_selector
    out = _resource(dyn, api_version, kind).get(namespace=namespace, _request_timeout=30, **query)
    return out.to_dict().get("items") or []


def delete(dyn: DynamicClient, api_version: str, kind: str, namespace: str | None, name: str,
           uid: str | None = None, propagation: str = "Foreground") -> bool:
    """Delete (foreground by default: pods go first); False when it was already gone.

    With `uid`, the API server deletes only that incarnation (a precondition), so an object that
    someone re-created under the same name since we looked is never taken.
    """
    body: dict[str, Any] = {"propagationPolicy": propagation}
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
