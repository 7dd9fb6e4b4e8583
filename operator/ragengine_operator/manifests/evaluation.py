"""spec.evaluation -> the engine's evaluation file (a ConfigMap it watches, ``ragengine.evaluation.config``) and
the golden set's ConfigMap key mounted beside it: both directories, so the kubelet updates them in place and
the engine picks up an edit without a restart (docs/evaluation.md)."""

from __future__ import annotations

import json
from typing import Any

from .. import constants as c
from ..spec import RAGEngineSpec
from .labels import Owner, metadata


def evaluation_configmap_name(owner: Owner) -> str:
    return owner.child("evaluation")


def evaluation_file(spec: RAGEngineSpec) -> dict[str, Any]:
    """What ``ragengine.evaluation.config.EvaluationFile`` reads."""
    ev = spec.evaluation
    assert ev is not None
    out: dict[str, Any] = {"index": spec.evaluation_index, "topK": ev.top_k}
    source = ev.golden_set.source
    if source is not None:  # the source's sync hands the file to the engine (sources/sync.py)
        out["goldenSetSource"] = {"name": source.name, "path": source.path}
    else:
        out["goldenSetFile"] = f"{c.ENGINE_GOLDEN_DIR}/{c.ENGINE_GOLDEN_FILE}"
    if ev.schedule is not None:
        out["schedule"] = ev.schedule
    if ev.gate is not None:
        out["gate"] = ev.gate.model_dump(by_alias=True, exclude_none=True)
    return out


def engine_evaluation_configmap(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(owner, evaluation_configmap_name(owner), c.COMPONENT_ENGINE),
            "data": {c.ENGINE_EVALUATION_FILE: json.dumps(evaluation_file(spec), sort_keys=True)}}


def mount_evaluation(pod: dict[str, Any], container: dict[str, Any], owner: Owner, spec: RAGEngineSpec) -> None:
    """The evaluation file and the golden set (optional: a missing ConfigMap or key is the engine's to report
    on /health, not a pod that cannot start)."""
    ev = spec.evaluation
    if ev is None:
        return
    ref = ev.golden_set.config_map_ref
    volumes = [{"name": "evaluation", "configMap": {"name": evaluation_configmap_name(owner)}}]
    mounts = [{"name": "evaluation", "mountPath": c.ENGINE_EVALUATION_DIR, "readOnly": True}]
    if ref is not None:
        volumes.append({"name": "golden-set", "configMap": {
            "name": ref.name, "optional": True, "items": [{"key": ref.key, "path": c.ENGINE_GOLDEN_FILE}]}})
        mounts.append({"name": "golden-set", "mountPath": c.ENGINE_GOLDEN_DIR, "readOnly": True})
    pod["spec"]["volumes"] += volumes
    container["volumeMounts"] += mounts
