"""Read the children that status is computed from."""

from __future__ import annotations

from kubernetes import client as k8s

from .. import constants as c
from ..build.engine import engine_deployment_name
from ..build.inference import inference_name
from ..build.labels import Owner
from ..reconcile.status import Observed
from ..spec import RAGEngineSpec
from .apply import get, list_objects


def observe(api: k8s.ApiClient, owner: Owner, spec: RAGEngineSpec | None) -> Observed:
    obs = Observed()
    if spec is None:
        return obs
    wanted = {c.COMPONENT_ENGINE: engine_deployment_name(owner)}
    if spec.runs_vllm:
        wanted[c.COMPONENT_INFERENCE] = inference_name(owner)
    for component, name in wanted.items():
        dep = get(api, "apps/v1", "Deployment", owner.namespace, name)
        obs.deployments[component] = dep
        available = dep is not None and (dep.get("status") or {}).get("availableReplicas", 0) >= dep["spec"].get("replicas", 1)
        if dep is not None and not available:  # pods only matter to explain why it is not available
            selector = f"{c.SELECTOR_NAME}={owner.name},{c.SELECTOR_COMPONENT}={component}"
            obs.pods[component] = list_objects(api, "v1", "Pod", owner.namespace, selector)
    return obs
