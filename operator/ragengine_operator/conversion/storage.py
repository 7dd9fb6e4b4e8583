"""Rewrite every stored RAGEngine at the storage version, then tell the CRD (status.storedVersions).

After an upgrade etcd still holds the RAGEngines written as v1alpha1 until each is written again. As
kube-storage-version-migrator does, an empty update of each object makes the API server store it at the
storage version (the new encoding differs from the stored bytes, so the write happens; the object does not
change). Once every object is rewritten, storedVersions is cut to the storage version alone: v1alpha1 can
then leave the CRD in a later release without stranding an object. Objects created meanwhile are already
stored at the storage version. Run by the leader of the release that owns the CRD.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from .. import constants as c

log = logging.getLogger(__name__)
PAGE = 100


@dataclass
class Migration:
    rewritten: int = 0
    gone: int = 0
    stored_versions: list[str] = field(default_factory=list)
    done: bool = False


def stored_versions(ext: k8s.ApiextensionsV1Api) -> list[str]:
    crd = ext.read_custom_resource_definition(c.CRD_NAME, _request_timeout=10)
    return list((crd.status and crd.status.stored_versions) or [])


def migrate(api: k8s.ApiClient) -> Migration:
    """Rewrite each RAGEngine once (retrying a write that raced with another), then trim storedVersions."""
    ext, objects = k8s.ApiextensionsV1Api(api), k8s.CustomObjectsApi(api)
    result = Migration(stored_versions=stored_versions(ext))
    if result.stored_versions == [c.VERSION]:
        result.done = True
        return result
    log.info("storage version migration: storedVersions %s -> [%s]", result.stored_versions, c.VERSION)
    token = None
    while True:
        page: dict = objects.list_cluster_custom_object(  # type: ignore[assignment]  # JSON, typed object
            c.GROUP, c.VERSION, c.PLURAL, limit=PAGE, _continue=token, _request_timeout=30)
        for item in page.get("items", []):
            meta = item["metadata"]
            if _rewrite(objects, meta["namespace"], meta["name"], meta["resourceVersion"]):
                result.rewritten += 1
            else:
                result.gone += 1
        token = page.get("metadata", {}).get("continue")
        if not token:
            break
    ext.patch_custom_resource_definition_status(c.CRD_NAME, {"status": {"storedVersions": [c.VERSION]}},
                                                _request_timeout=10)
    result.stored_versions, result.done = [c.VERSION], True
    log.info("storage version migration done: %d RAGEngine(s) rewritten at %s (%d gone meanwhile)",
             result.rewritten, c.VERSION, result.gone)
    return result


def _rewrite(objects: k8s.CustomObjectsApi, namespace: str, name: str, version: str) -> bool:
    """An empty update at resourceVersion ``version``; on a conflict, again at the current one. False: deleted."""
    for _ in range(10):
        try:
            objects.patch_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name,
                                                   {"metadata": {"resourceVersion": version}}, _request_timeout=30)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            if exc.status != 409:
                raise
            current: dict = objects.get_namespaced_custom_object(  # type: ignore[assignment]  # JSON, typed object
                c.GROUP, c.VERSION, namespace, c.PLURAL, name, _request_timeout=30)
            version = current["metadata"]["resourceVersion"]
    raise RuntimeError(f"{namespace}/{name} changed ten times while being rewritten")
