"""spec.evaluation: the model's refusals, the engine's evaluation file (read back with the engine's own reader),
the golden set's volume, and status, the Reindexing condition and Events from the engine's /health."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ragengine.evaluation.config import EvaluationFile
from ragengine_operator import constants as c
from ragengine_operator.manifests.engine import engine_deployment
from ragengine_operator.manifests.engine_env import engine_env, target_digest
from ragengine_operator.manifests.evaluation import engine_evaluation_configmap
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.reconcile.evaluation import evaluation_status, events
from ragengine_operator.reconcile.status import Observed, indexes_status, reindexing
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("team-a", "docs", "uid-1")
EVALUATION = {"goldenSet": {"configMapRef": {"name": "golden", "key": "set.jsonl"}}, "index": "kb", "topK": 5,
              "schedule": "0 3 * * *", "gate": {"metric": "mrr@5", "minimum": 0.5, "maxRegression": 0.02}}


def _spec(**evaluation) -> RAGEngineSpec:
    return RAGEngineSpec.model_validate({"evaluation": {**EVALUATION, **evaluation}})


def test_the_models_refusals():
    cases = [({"goldenSet": {}}, "exactly one of configMapRef or source"),
             ({"index": None}, "evaluation.index is required with goldenSet.configMapRef"),
             ({"gate": {"metric": "mrr@10"}}, "k must equal evaluation.topK"),
             ({"gate": {"metric": "precision@5"}}, "String should match pattern"),
             ({"schedule": "whenever"}, "neither a five-field cron expression"),
             ({"goldenSet": {"source": {"name": "faq", "path": "golden.jsonl"}}}, "not a spec.sources entry")]
    for change, words in cases:
        with pytest.raises(ValidationError, match=words):
            _spec(**change)
    with pytest.raises(ValidationError, match="must be a git or http source"):
        RAGEngineSpec.model_validate({"sources": [{"name": "faq", "configMap": {"name": "faq"}}], "evaluation": {
            "goldenSet": {"source": {"name": "faq", "path": "x"}}}})
    spec = RAGEngineSpec.model_validate({"sources": [{"name": "docs", "index": "handbook", "git": {
        "url": "https://git.example.com/docs.git"}}], "evaluation": {"goldenSet": {"source": {
            "name": "docs", "path": "eval/golden.jsonl"}}}})
    assert spec.evaluation_index == "handbook"


def test_the_engine_reads_the_evaluation_file_and_mounts_the_golden_set():
    spec = _spec()
    cm = engine_evaluation_configmap(OWNER, spec)
    assert cm["metadata"]["name"] == "docs-evaluation"
    parsed = EvaluationFile.model_validate(json.loads(cm["data"][c.ENGINE_EVALUATION_FILE]))  # the engine's reader
    assert (parsed.index, parsed.top_k, parsed.schedule, parsed.golden_set_file) == (
        "kb", 5, "0 3 * * *", f"{c.ENGINE_GOLDEN_DIR}/{c.ENGINE_GOLDEN_FILE}")
    assert parsed.gate is not None and (parsed.gate.metric, parsed.gate.minimum, parsed.gate.max_regression) == (
        "mrr@5", 0.5, 0.02)
    pod = engine_deployment(OWNER, spec)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["golden-set"]["configMap"] == {"name": "golden", "optional": True,
                                                  "items": [{"key": "set.jsonl", "path": c.ENGINE_GOLDEN_FILE}]}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["evaluation"] == c.ENGINE_EVALUATION_DIR and mounts["golden-set"] == c.ENGINE_GOLDEN_DIR
    env = {e["name"]: e.get("value") for e in engine_env(OWNER, spec)}
    assert env["RAGENGINE_EVALUATION_FILE"] == f"{c.ENGINE_EVALUATION_DIR}/{c.ENGINE_EVALUATION_FILE}"
    plain = engine_deployment(OWNER, RAGEngineSpec())["spec"]["template"]["spec"]
    assert "golden-set" not in {v["name"] for v in plain["volumes"]}
    assert "RAGENGINE_EVALUATION_FILE" not in {e["name"] for e in engine_env(OWNER, RAGEngineSpec())}


HEALTH = {
    "embedding": {"target": None},
    "indexes": {"kb": {"version": 1, "current": True, "documents": 16, "rejected": {
        "version": 2, "message": "version 2 rejected: mrr@5 0.6875 is 0.3125 below live version 1's 1.0000, more than "
        "maxRegression 0.0200", "metric": "mrr@5", "candidate": 0.6875, "baseline": 1.0, "minimum": 0.5,
        "max_regression": 0.02}}},
    "evaluation": {"indexes": {"kb": {
        "id": "eval_b", "version": 1, "trigger": "schedule", "finished_at": "2026-11-28T03:00:04Z",
        "metrics": {"mrr@5": 0.9, "recall@5": 1.0},
        "previous": {"id": "eval_a", "version": 1, "metrics": {"mrr@5": 1.0, "recall@5": 1.0}}}}},
}


def test_status_condition_and_events_from_health():
    spec = _spec()
    status = {"evaluation": evaluation_status(HEALTH), "indexes": indexes_status(HEALTH)}
    assert status["evaluation"] == [{"index": "kb", "run": "eval_b", "version": 1, "trigger": "schedule",
                                     "finishedAt": "2026-11-28T03:00:04Z", "metrics": {"mrr@5": 0.9, "recall@5": 1.0},
                                     "previousRun": "eval_a", "previousMetrics": {"mrr@5": 1.0, "recall@5": 1.0}}]
    assert status["indexes"][0]["rejectedVersion"] == 2
    cond = reindexing(spec, Observed(engine_health={**HEALTH, "embedding": {"target": target_digest(spec)}}))
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Rejected")
    assert "index kb: version 2 rejected: mrr@5 0.6875" in cond["message"] and "activate" in cond["message"]
    found = events(spec, {}, status, HEALTH, {})
    assert ("Warning", "EvaluationScoreDropped", "index kb version 1 (run eval_b): mrr@5 0.9000, down 0.1000 from "
            "1.0000 (run eval_a), more than the threshold 0.0200") in found
    rejected = [e for e in found if e[1] == "ReindexRejected"]
    assert rejected == [("Warning", "ReindexRejected", "index kb: " + HEALTH["indexes"]["kb"]["rejected"]["message"]
                         + " (mrr@5 0.6875, live version 1.0000, minimum 0.5, maxRegression 0.02)")]
    # Once reported, neither is reported again.
    assert events(spec, status, status, HEALTH, {"kb": 2}) == []


def test_a_golden_set_from_a_source_is_named_in_the_evaluation_file_and_the_sync_request():
    from ragengine_operator.syncer.runner import Target

    body = {"sources": [{"name": "docs", "index": "handbook", "git": {"url": "https://git.example.com/d.git"}},
                        {"name": "faq", "index": "faq", "git": {"url": "https://git.example.com/f.git"}}],
            "evaluation": {"goldenSet": {"source": {"name": "docs", "path": "eval/golden.jsonl"}}, "topK": 10}}
    spec = RAGEngineSpec.model_validate(body)
    parsed = EvaluationFile.model_validate(json.loads(engine_evaluation_configmap(OWNER, spec)["data"][
        c.ENGINE_EVALUATION_FILE]))
    assert parsed.index == "handbook" and parsed.golden_set_file is None
    assert parsed.golden_set_source is not None and parsed.golden_set_source.path == "eval/golden.jsonl"
    pod = engine_deployment(OWNER, spec)["spec"]["template"]["spec"]
    assert "golden-set" not in {v["name"] for v in pod["volumes"]}  # nothing to mount: the sync hands it over
    target = Target.from_body("team-a", "docs", "uid-1", body, {})
    assert target is not None and target.golden_set == ("docs", "eval/golden.jsonl")
