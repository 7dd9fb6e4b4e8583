"""spec.backup -> a CronJob that exports every index to a volume, and that volume's PVC. Pure.

The CronJob's pod runs the engine image's own CLI, ``ragengine export --url <the engine's Service> --all
--dir /backup --keep <retention>``: each index streamed through GET /indexes/{name}/export, checked as it
arrives (the import's reader) and renamed into place only when complete, then all but the newest
``retention`` files of each index deleted. It reads the engine's API key from its Secret (a secretKeyRef;
the admin key sees every index), runs as the engine's user under Pod Security "restricted", with no
Kubernetes token, and is admitted by the engine's NetworkPolicy by its labels.
"""

from __future__ import annotations

from typing import Any

from ragengine.settings import EngineSettings

from .. import constants as c
from ..spec import RAGEngineSpec
from .engine import engine_service_name
from .engine_env import engine_api_key_ref
from .labels import Owner, labels, metadata, pvc
from .security import container_security_context, pod_security_context

BACKUP_DIR = "/backup"
UID = 1000  # the engine image's user: the claim is written as it (fsGroup)


def backup_name(owner: Owner) -> str:
    return owner.child("backup")


def backup_claim(owner: Owner, spec: RAGEngineSpec) -> str:
    assert spec.backup is not None
    return spec.backup.volume.claim_name or backup_name(owner)


def backup_pvc(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    """The claim the operator creates when spec.backup names none; kept like the data volume (reclaimPolicy)."""
    assert spec.backup is not None
    volume = spec.backup.volume
    return pvc(owner, backup_name(owner), c.COMPONENT_BACKUP, volume.size, volume.storage_class_name, "ReadWriteOnce",
               retain=spec.storage.volume.reclaim_policy == "Retain")


def backup_command(owner: Owner, spec: RAGEngineSpec) -> list[str]:
    assert spec.backup is not None
    url = f"http://{owner.service_host(engine_service_name(owner))}:{c.ENGINE_SERVICE_PORT}"
    return ["ragengine", "export", "--url", url, "--all", "--dir", BACKUP_DIR, "--keep", str(spec.backup.retention)]


def backup_cronjob(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    assert spec.backup is not None
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    key = engine_api_key_ref(owner, spec.auth)
    if key is not None:
        env.append({"name": EngineSettings.env_name("api_key"),
                    "valueFrom": {"secretKeyRef": {"name": key.name, "key": key.key}}})
    container = {
        "name": "backup",
        "image": spec.engine.image or owner.engine_image,
        "command": backup_command(owner, spec),
        "env": env,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "backup", "mountPath": BACKUP_DIR}, {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": {**container_security_context(), "readOnlyRootFilesystem": True},
    }
    pod: dict[str, Any] = {
        "metadata": {"labels": labels(owner, c.COMPONENT_BACKUP)},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security_context(UID),
            "containers": [container],
            "volumes": [{"name": "backup", "persistentVolumeClaim": {"claimName": backup_claim(owner, spec)}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
        },
    }
    if spec.engine.node_selector:
        pod["spec"]["nodeSelector"] = dict(spec.engine.node_selector)
    if spec.engine.tolerations:
        pod["spec"]["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.engine.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata(owner, backup_name(owner), c.COMPONENT_BACKUP),
        "spec": {
            "schedule": spec.backup.schedule,
            "concurrencyPolicy": "Forbid",  # one export of an engine at a time
            "startingDeadlineSeconds": 3600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {"backoffLimit": 2, "ttlSecondsAfterFinished": 86400, "template": pod}},
        },
    }
