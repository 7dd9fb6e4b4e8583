"""Owner identity, labels, selectors, owner references and the pod-template config hash."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .. import constants as c


@dataclass(frozen=True)
class Owner:
    """The RAGEngine that owns the children (namespace, name, uid) and the operator's defaults."""

    namespace: str
    name: str
    uid: str
    engine_image: str = "ghcr.io/ragengine/ragengine-engine:0.1.0"
    vllm_image: str = c.DEFAULT_VLLM_IMAGE
    # The cluster's DNS domain (settings.cluster_domain); "" = the short <svc>.<ns>.svc form, which the
    # pods' DNS search path completes under any domain.
    cluster_domain: str = "cluster.local"
    # settings.status_key_secret (manifests/status_key.py); never in a repr or a log line
    status_key_secret: str = dataclasses.field(default="", repr=False)

    def child(self, suffix: str) -> str:
        return f"{self.name}-{suffix}" if suffix else self.name

    def service_host(self, service: str) -> str:
        """In-cluster DNS name of one of this RAGEngine's Services."""
        host = f"{service}.{self.namespace}.svc"
        return f"{host}.{self.cluster_domain}" if self.cluster_domain else host


def selector(owner: Owner, component: str) -> dict[str, str]:
    """Selector labels: stable for the object's life (a Deployment selector is immutable)."""
    return {c.SELECTOR_NAME: owner.name, c.SELECTOR_COMPONENT: component}


APP_NAMES = {c.COMPONENT_ENGINE: "ragengine", c.COMPONENT_INFERENCE: "vllm", c.COMPONENT_SYNC: "ragengine-source-sync",
             c.COMPONENT_BACKUP: "ragengine-backup"}


def labels(owner: Owner, component: str) -> dict[str, str]:
    return {
        **selector(owner, component),
        c.LABEL_NAME: APP_NAMES[component],
        c.LABEL_INSTANCE: owner.name,
        c.LABEL_COMPONENT: component,
        c.LABEL_PART_OF: "ragengine",
        c.LABEL_MANAGED_BY: c.FIELD_MANAGER,
    }


def owner_reference(owner: Owner) -> dict[str, Any]:
    # controller=True + blockOwnerDeletion: kcm's garbage collector deletes children with the CR.
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(owner: Owner, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner, component),
        "ownerReferences": [owner_reference(owner)],
    }


def config_hash(obj: Any) -> str:
    """A short stable hash of rendered config: a changed hash on a pod template means a rollout."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def stamp_template(template: dict[str, Any], secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """Annotate a pod template with the hash of everything else in it, plus the digests of the Secrets
    its env reads (name -> digest): a rotated Secret changes the hash and so rolls the pods."""
    digest = config_hash({"template": template, "secrets": secrets} if secrets else template)
    template.setdefault("metadata", {}).setdefault("annotations", {})[c.CONFIG_HASH_ANNOTATION] = digest
    return template


def merge_resources(base: dict[str, dict[str, Any]], extra: Any) -> dict[str, dict[str, Any]]:
    """base requests/limits overlaid with a spec ResourceRequirements (or None)."""
    out = {k: dict(v) for k, v in base.items()}
    if extra is not None:
        for kind in ("requests", "limits"):
            values = getattr(extra, kind)
            if values:
                out.setdefault(kind, {}).update({k: str(v) for k, v in values.items()})
    return {k: v for k, v in out.items() if v}


def key_secret(owner: Owner, name: str, key: str, component: str, value: str) -> dict[str, Any]:
    """A Secret holding one operator-generated key. Created once by the controller and never re-applied
    (a new value on every reconcile would break its readers mid-flight). Its name ends in -api-key and
    it carries the operator's managed-by label: the convention that the chart's admission policy
    restricts the operator's Secret writes to."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata(owner, name, component),
            "stringData": {key: value}}


def pvc(owner: Owner, name: str, component: str, size: str, storage_class: str | None, access_mode: str,
        retain: bool = False) -> dict:
    """``retain``: no owner reference, so the garbage collector leaves the claim (and its data) when the
    RAGEngine goes; a RAGEngine of the same name adopts it again (reconcile/plan.py:retained_claim)."""
    spec: dict[str, Any] = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    meta = metadata(owner, name, component)
    if retain:
        del meta["ownerReferences"]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def http_probe(path: str, port: str, period: int, failures: int, timeout: int = 5) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def http_service(owner: Owner, name: str, component: str, port: int) -> dict[str, Any]:
    """A ClusterIP Service in front of one component's pods, on their named port ``http``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, name, component),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(owner, component),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def hpa(owner: Owner, target: str, component: str, autoscaling: Any, metric: dict[str, Any] | None = None,
        ) -> dict[str, Any]:
    """An autoscaling/v2 HPA on Deployment `target`, named like it: CPU utilisation, or `metric`."""
    cpu = {"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": autoscaling.target_cpu_utilization_percentage}}}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(owner, target, component),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": autoscaling.min_replicas,
            "maxReplicas": autoscaling.max_replicas,
            "metrics": [metric or cpu],
        },
    }


def duration_seconds(text: str) -> int:
    """'1h30m', '45m', '90s' -> seconds (the CRD's pattern admits only these forms)."""
    units = {"h": 3600, "m": 60, "s": 1}
    total, number = 0, ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total += int(number) * units[ch]
            number = ""
    return total


def secret_digest(secret: dict[str, Any] | None) -> str:
    """What identifies the version of a Secret the pods would read ("absent" when it does not exist):
    its uid and resourceVersion, never its data. The digest lands in a pod-template annotation that
    anyone who can read Deployments sees; a hash of the data would let them test guesses of a weak key
    offline. A new uid or resourceVersion (any write to the Secret) rolls the pods that read it."""
    if secret is None:
        return "absent"
    meta = secret.get("metadata") or {}
    return f"{meta.get('uid', '')}/{meta.get('resourceVersion', '')}"


def pick(versions: dict[str, str] | None, names: set[str]) -> dict[str, str]:
    return {k: v for k, v in (versions or {}).items() if k in names}


def apply_pod_options(pod: dict[str, Any], container: dict[str, Any], opts: Any) -> None:
    """Fold a spec's PodOptions into a pod template (before it is stamped). The operator's own labels
    and env win: extra env goes first (a later duplicate name overrides an earlier one), labels are
    merged under ours."""
    spec = pod["spec"]
    for field, key in (("affinity", "affinity"), ("priority_class_name", "priorityClassName"),
                       ("runtime_class_name", "runtimeClassName"), ("service_account_name", "serviceAccountName")):
        value = getattr(opts, field)
        if value is not None:
            spec[key] = value
    if opts.topology_spread_constraints:
        spec["topologySpreadConstraints"] = list(opts.topology_spread_constraints)
    if opts.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": ref.name} for ref in opts.image_pull_secrets]
    if opts.pod_labels:
        pod["metadata"]["labels"] = {**opts.pod_labels, **pod["metadata"]["labels"]}
    if opts.pod_annotations:
        pod["metadata"]["annotations"] = {**opts.pod_annotations, **pod["metadata"].get("annotations", {})}
    if opts.env:
        extra = [e.model_dump(by_alias=True, exclude_none=True) for e in opts.env]
        managed = {e["name"] for e in container.get("env", [])}
        container["env"] = [e for e in extra if e["name"] not in managed] + container.get("env", [])
