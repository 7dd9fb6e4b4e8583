"""The TokenReview ClusterRoleBindings' clean-up, outside the reconciles: once a minute, one list of every
binding this operator labelled (``ragengine.io/component=tokenreview``), and each one that should go is
deleted (with a uid precondition: never one re-applied meanwhile).

A binding goes (``why_delete``) when:

- its RAGEngine is gone: a cluster-scoped object cannot have a namespaced owner, so the garbage collector
  never takes it. Checked against the API server, not a cache: only when no RAGEngine of its namespace and
  name exists (one re-created under the name adopts the binding through its reconcile, or deletes it);
- it carries an earlier release's name (``legacy_binding_name``: ``ragengine-tokenreview-<namespace>-<name>``,
  which collides across namespaces) and the RAGEngine either no longer has ServiceAccount rules or has its
  binding under the hashed name already: an upgrade leaves no stale grant (one bound to the account the
  tenant named, say), and no engine is without its grant in between. Only a binding labelled for that
  RAGEngine is ever deleted, never one of the same name labelled for another.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from .. import constants as c
from ..manifests.access import COMPONENT_TOKENREVIEW, LABEL_OWNER_NAMESPACE, binding_name
from ..manifests.labels import Owner
from . import apply as kube

log = logging.getLogger(__name__)
RBAC = "rbac.authorization.k8s.io/v1"


def why_delete(binding: dict[str, Any], ragengine: dict[str, Any] | None, present: set[str]) -> str | None:
    """Why the sweep deletes ``binding`` (see the module), or None. ``ragengine``: the RAGEngine its labels
    name (None: none exists); ``present``: the names of every binding listed."""
    labels = binding["metadata"].get("labels") or {}
    ns, name = str(labels.get(LABEL_OWNER_NAMESPACE)), str(labels.get(c.SELECTOR_NAME))
    if ragengine is None:
        return f"its RAGEngine {ns}/{name} is gone"
    current = binding_name(Owner(ns, name, ""))
    if binding["metadata"]["name"] == current:
        return None  # the RAGEngine's reconcile keeps or deletes it
    if not ((ragengine.get("spec") or {}).get("access") or {}).get("serviceAccounts"):
        return f"an earlier release's binding, and {ns}/{name} has no ServiceAccount rules now"
    if current in present:
        return f"an earlier release's name for {ns}/{name}'s binding, which is now {current}"
    return None  # not replaced yet: the next sweep, after the reconcile applied the new one


def sweep_bindings(dyn: DynamicClient) -> int:
    """Delete the bindings that should go; -> how many. Nothing without cluster-wide rights (rbac.tokenReview:
    false), where the operator made none either."""
    selector = f"{c.LABEL_MANAGED_BY}={c.FIELD_MANAGER},{c.SELECTOR_COMPONENT}={COMPONENT_TOKENREVIEW}"
    try:
        bindings = kube.list_objects(dyn, RBAC, "ClusterRoleBinding", None, selector)
    except ApiException as exc:
        if exc.status == 403:
            return 0
        raise
    present = {b["metadata"]["name"] for b in bindings}
    deleted = 0
    for binding in bindings:
        meta = binding["metadata"]
        labels = meta.get("labels") or {}
        ns, name = labels.get(LABEL_OWNER_NAMESPACE), labels.get(c.SELECTOR_NAME)
        if not ns or not name:
            continue
        why = why_delete(binding, kube.get(dyn, c.API_VERSION, c.KIND, ns, name), present)
        if why and kube.delete(dyn, RBAC, "ClusterRoleBinding", None, meta["name"], uid=meta["uid"]):
            deleted += 1
            log.info("deleted TokenReview binding %s: %s", meta["name"], why)
    return deleted
