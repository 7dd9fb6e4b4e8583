"""spec.guardrails -> the policy ConfigMap (the chart's default when none is named) and its volume.

The ConfigMap is mounted as a directory (never subPath): the kubelet swaps the files of a ConfigMap
volume when the ConfigMap changes, and the engine re-reads the policy when the file changes, so an edit
applies without a restart. Nothing about the ConfigMap's content goes into the pod template either.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from .. import constants as c
from ..spec import RAGEngineSpec
from .labels import Owner, metadata

POLICY_KEY = "guardrails.yaml"  # KAITO's key
MOUNT_DIR = "/etc/ragengine/guardrails"
POLICY_PATH = f"{MOUNT_DIR}/{POLICY_KEY}"
VOLUME = "guardrails"


def packaged_default_policy() -> str:
    """KAITO's default template, as the engine package ships it (when the chart gives none)."""
    return resources.files("ragengine.guardrails").joinpath("default-policy.yaml").read_text()


def default_policy(path: Path | None) -> str:
    """The chart's default policy (a file the operator's pod mounts), else the packaged one."""
    if path is not None:
        try:
            return path.read_text()
        except OSError:
            pass
    return packaged_default_policy()


def policy_configmap_name(owner: Owner, spec: RAGEngineSpec) -> str:
    ref = spec.guardrails.config_map_ref
    return ref.name if ref is not None else default_configmap_name(owner)


def default_configmap_name(owner: Owner) -> str:
    return owner.child("guardrails")


def default_policy_configmap(owner: Owner, policy: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(owner, default_configmap_name(owner), c.COMPONENT_ENGINE), "data": {POLICY_KEY: policy}}


def policy_volume(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    return {"name": VOLUME, "configMap": {"name": policy_configmap_name(owner, spec),
                                          "items": [{"key": POLICY_KEY, "path": POLICY_KEY}]}}


def policy_mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": MOUNT_DIR, "readOnly": True}
