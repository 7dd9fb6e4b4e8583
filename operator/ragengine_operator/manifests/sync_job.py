"""One source sync as a Job in the RAGEngine's namespace (job mode of syncer/runner.py). Pure.

The pod fetches and parses tenant data, so it gets nothing of the operator's:

- no Kubernetes token (``automountServiceAccountToken: false`` on the namespace's default
  ServiceAccount) and no Service links;
- Pod Security "restricted", a read-only root filesystem, an emptyDir ``/tmp`` with a size limit;
- its own CPU and memory limits, ``activeDeadlineSeconds``, ``backoffLimit: 0`` (the operator
  retries with its own backoff) and a TTL, so nothing is left behind if the operator is gone;
- in the tenant's namespace, labelled ``ragengine.io/component: source-sync``: the namespace's
  NetworkPolicies select it (an egress policy for the tenant applies to its fetches), and the
  engine's policy admits it by those labels.

Credentials never pass through the operator or the Job object: the source's Secret is a volume
(the operator only checked its type), the engine's key a secretKeyRef, a configMap source's
ConfigMap a volume. The request (sources/protocol.py) is an environment variable; its digest is an
annotation, so a restarted operator can tell whether a running Job is the one it would start.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .. import constants as c
from ..sources.protocol import API_KEY_ENV, CONFIGMAP_DIR, CONTAINER, CREDENTIALS_DIR, REQUEST_ENV, SyncRequest
from ..spec import SecretKeyRef
from .labels import Owner, labels, metadata
from .security import container_security_context, pod_security_context

UID = 1000  # images/sync.Dockerfile's user
TTL_SECONDS = 600  # a finished Job the operator did not delete (it was down) goes after this
SOURCE_LABEL = f"{c.GROUP}/source"
REQUEST_ANNOTATION = f"{c.GROUP}/sync-request"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"  # set by the Job controller on its pods


@dataclass(frozen=True)
class SyncPod:
    """The operator's settings for sync pods (settings.sync_*)."""

    image: str
    cpu: str = "1"
    memory: str = "1Gi"
    deadline_seconds: int = 1800
    tmp_size: str = "2Gi"
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()  # JSON of each core/v1 Toleration (hashable, for a frozen dataclass)

    @classmethod
    def from_settings(cls, s: Any) -> SyncPod:
        return cls(s.sync_image, s.sync_cpu, s.sync_memory, s.sync_deadline_seconds, s.sync_tmp_size,
                   tuple(sorted(s.sync_node_selector.items())),
                   tuple(json.dumps(t, sort_keys=True) for t in s.sync_tolerations))


def sync_job_name(owner: Owner, request: SyncRequest) -> str:
    """<name>-sync-<source> (or -prune-): one Job per source at a time; hashed down to 63 characters
    (the Job controller puts the name in a label)."""
    name = f"{owner.name}-{request.action}-{request.name}"
    if len(name) <= 63:
        return name
    return f"{name[:54].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def sync_labels(owner: Owner, source: str) -> dict[str, str]:
    return {**labels(owner, c.COMPONENT_SYNC), SOURCE_LABEL: source}


def sync_job(owner: Owner, request: SyncRequest, pod: SyncPod, credentials: str | None = None,
             api_key: SecretKeyRef | None = None, configmap: str | None = None,
             service_account: str | None = None) -> dict[str, Any]:
    """``credentials``: the source's Secret; ``api_key``: the engine's key (None: auth off);
    ``configmap``: a configMap source's ConfigMap; ``service_account``: the pod's ServiceAccount (an S3 source's
    workload identity: IRSA's webhook mounts its own STS token; the Kubernetes token stays unmounted)."""
    env: list[dict[str, Any]] = [
        {"name": REQUEST_ENV, "value": request.to_json()},
        {"name": "HOME", "value": "/tmp"},
        {"name": "TMPDIR", "value": "/tmp"},
    ]
    if api_key is not None:
        env.append({"name": API_KEY_ENV,
                    "valueFrom": {"secretKeyRef": {"name": api_key.name, "key": api_key.key}}})
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": pod.tmp_size}}]
    if credentials is not None:
        mounts.append({"name": "credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True})
        # 0440 + fsGroup: readable by the sync's user only
        volumes.append({"name": "credentials", "secret": {"secretName": credentials, "defaultMode": 0o440}})
    if configmap is not None:
        mounts.append({"name": "configmap", "mountPath": CONFIGMAP_DIR, "readOnly": True})
        volumes.append({"name": "configmap", "configMap": {"name": configmap}})
    container = {
        "name": CONTAINER,
        "image": pod.image,
        "command": ["ragengine-operator", "sync-source"],
        "env": env,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": pod.cpu, "memory": pod.memory}},
        "volumeMounts": mounts,
        "securityContext": {**container_security_context(), "readOnlyRootFilesystem": True},
        # the result is written there; a crash before it leaves the log's tail instead
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {k: v for k, v in pod_security_context(UID).items() if k != "fsGroupChangePolicy"},
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": 5,
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    if pod.node_selector:
        pod_spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        pod_spec["tolerations"] = [json.loads(t) for t in pod.tolerations]
    meta = metadata(owner, sync_job_name(owner, request), c.COMPONENT_SYNC)
    meta["labels"] = sync_labels(owner, request.name)
    meta["annotations"] = {REQUEST_ANNOTATION: request.digest()}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": pod.deadline_seconds,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {"metadata": {"labels": sync_labels(owner, request.name)}, "spec": pod_spec},
        },
    }
