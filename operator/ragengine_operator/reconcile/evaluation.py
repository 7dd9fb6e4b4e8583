"""What the engine's ``GET /health`` says of evaluations, as status and Events (docs/evaluation.md). Pure.

- ``status.evaluation``: each index's last run (its id, the version scored, the metrics, when, what started it).
- The Reindexing condition says why a gated re-index was rejected (``rejected_reason``).
- Events (``events``), each once, by comparing the status before and after: ``EvaluationScoreDropped``
  (Warning) when an index's new run scores its gate metric more than the threshold below the run before it,
  or below the gate's minimum; ``ReindexRejected`` (Warning) for a newly rejected version, naming the metric,
  both scores and the threshold; ``EvaluationCompleted`` (Normal) for other new runs of the configured index.
"""

from __future__ import annotations

from typing import Any

MAX_INDEXES = 100


def evaluation_status(health: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    runs = ((health.get("evaluation") or {}).get("indexes") or {})
    for index, run in sorted(runs.items())[:MAX_INDEXES]:
        previous = run.get("previous") or {}
        out.append({"index": index, "run": run.get("id"), "version": run.get("version"), "trigger": run.get("trigger"),
                    "finishedAt": run.get("finished_at"), "metrics": run.get("metrics") or {},
                    "previousRun": previous.get("id"), "previousMetrics": previous.get("metrics")})
    return out


def rejections(health: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Index -> its last re-index's rejection (the engine's words and the gate's numbers)."""
    return {name: entry["rejected"] for name, entry in (health.get("indexes") or {}).items() if entry.get("rejected")}


def rejected_reason(health: dict[str, Any]) -> str | None:
    found = rejections(health)
    if not found:
        return None
    return "; ".join(f"index {name}: {r.get('message')} (version {r.get('version')} kept, rejected; an admin may "
                     "activate it: POST /indexes/<name>/versions/<v>/activate)" for name, r in sorted(found.items()))


def _threshold(spec: Any) -> tuple[str | None, float | None, float | None]:
    ev = spec.evaluation
    if ev is None:
        return None, None, None
    gate = ev.gate
    metric = gate.metric if gate is not None else f"mrr@{ev.top_k}"
    drop = ev.drop_threshold if ev.drop_threshold is not None else (gate.max_regression if gate else None)
    return metric, drop, gate.minimum if gate else None


def events(spec: Any, before: dict[str, Any], after: dict[str, Any], health: dict[str, Any] | None,
           before_rejected: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events this status change deserves."""
    out: list[tuple[str, str, str]] = []
    metric, drop, minimum = _threshold(spec)
    old = {e["index"]: e for e in before.get("evaluation") or []}
    for entry in after.get("evaluation") or []:
        if old.get(entry["index"], {}).get("run") == entry["run"] or metric is None:
            continue
        score = (entry.get("metrics") or {}).get(metric)
        prior = (entry.get("previousMetrics") or {}).get(metric)
        if score is None:
            continue
        where = f"index {entry['index']} version {entry['version']} (run {entry['run']})"
        if drop is not None and prior is not None and score < prior - drop - 1e-9:
            out.append(("Warning", "EvaluationScoreDropped", f"{where}: {metric} {score:.4f}, down {prior - score:.4f} "
                        f"from {prior:.4f} (run {entry['previousRun']}), more than the threshold {drop:.4f}"))
        elif minimum is not None and score < minimum - 1e-9:
            out.append(("Warning", "EvaluationScoreDropped", f"{where}: {metric} {score:.4f} is below the gate's "
                        f"minimum {minimum:.4f}"))
        else:
            out.append(("Normal", "EvaluationCompleted", f"{where}: {metric} {score:.4f}"))
    if health is not None:
        for name, r in sorted(rejections(health).items()):
            if before_rejected.get(name) == r.get("version"):
                continue
            numbers = [f"{r.get('metric')} {r.get('candidate'):.4f}" if r.get("candidate") is not None else None,
                       f"live version {r.get('baseline'):.4f}" if r.get("baseline") is not None else None,
                       f"minimum {r.get('minimum')}" if r.get("minimum") is not None else None,
                       f"maxRegression {r.get('max_regression')}" if r.get("max_regression") is not None else None]
            out.append(("Warning", "ReindexRejected", f"index {name}: {r.get('message')} ("
                        + ", ".join(n for n in numbers if n) + ")"))
    return out
