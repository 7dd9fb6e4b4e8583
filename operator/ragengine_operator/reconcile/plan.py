"""spec -> the objects to apply and the ones to delete. Pure: the same spec gives the same plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..build.engine import engine_data_pvc, engine_deployment, engine_service
from ..build.inference import inference_deployment, inference_name, inference_service, model_cache_pvc
from ..build.labels import Owner
from ..spec import RAGEngineSpec


@dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    name: str


@dataclass
class Plan:
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete: list[Ref] = field(default_factory=list)

    def names(self) -> list[str]:
        return [f"{o['kind']}/{o['metadata']['name']}" for o in self.apply]


def plan(owner: Owner, spec: RAGEngineSpec) -> Plan:
    """Volumes first (pods reference them), then workloads, then Services."""
    p = Plan()
    if spec.runs_vllm:
        p.apply += [model_cache_pvc(owner, spec), inference_deployment(owner, spec), inference_service(owner)]
    else:
        # URL mode or retrieval-only: no vLLM. The model-cache PVC stays (owned, so it goes with the
        # RAGEngine) to spare a re-download when switching back.
        p.delete += [Ref("apps/v1", "Deployment", inference_name(owner)), Ref("v1", "Service", inference_name(owner))]
    p.apply += [engine_data_pvc(owner, spec), engine_deployment(owner, spec), engine_service(owner)]
    return p
