"""Observed children -> status (conditions, observedGeneration, endpoint). Pure: `now` is an argument."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import constants as c
from ..manifests.engine import endpoint
from ..manifests.engine_env import embedding_target, engine_api_key_ref, llm_url, served_model, target_digest
from ..manifests.guardrails import policy_configmap_name
from ..manifests.labels import Owner
from ..sources.status import sources_condition
from ..spec import RAGEngineSpec
from .evaluation import evaluation_status, rejected_reason
from .guardrails import guardrails_condition
from .policy import POLICY_VIOLATION
from .workloads import AVAILABLE, FAILED, PROGRESSING, WorkloadState, inference_state, workload_state


@dataclass
class Observed:
    """What the API server says about the children (None = does not exist)."""

    deployments: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # component -> Deployment
    pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # component -> its pods
    # pod name -> (reason, message) of a mount failure the kubelet reported as an Event
    pod_events: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Why the external inference URL cannot serve (url mode); None = it answers, or not probed.
    inference_unreachable: str | None = None
    # The `reason` of an engine pod's GET /ready answering 503 (its readiness probe fails for it).
    engine_not_ready: str | None = None
    # What the PVCs request now (None = no such PVC): a spec may shrink back to these sizes.
    data_volume_size: str | None = None
    model_cache_volume_size: str | None = None
    # status.sources[] as the source syncer last wrote it (the RAGEngine's own status, not a child's)
    sources: list[dict[str, Any]] | None = None
    # The engine's GET /health (its indexes' versions and re-indexes, its target model's digest), when the
    # operator asked; engine_health_error: why asking failed. Neither: not asked this time.
    engine_health: dict[str, Any] | None = None
    engine_health_error: str | None = None
    # What status said last time: kept when the engine was not asked.
    previous_indexes: list[dict[str, Any]] | None = None
    previous_evaluation: list[dict[str, Any]] | None = None
    previous_embedding: str | None = None
    # spec.guardrails.enabled: the policy ConfigMap's guardrails.yaml (None: no such ConfigMap or key)
    guardrails_policy: str | None = None


FAISS_ROLL_STALLED = ("a FAISS engine's new pod starts on the node of the pod it replaces (the index volume is "
                      "ReadWriteOnce), and that node has no room for both: the old pod serves meanwhile; free room "
                      "there and the roll goes on (docs/operator.md, Rolling updates)")


def _serving(pods: list[dict[str, Any]]) -> bool:
    return any({x.get("type"): x.get("status") for x in (p.get("status") or {}).get("conditions") or []}.get("Ready")
               == "True" for p in pods)


def _cond(ctype: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": ctype, "status": "True" if ok else "False", "reason": reason, "message": message}


AUTH_OFF = ("spec.auth.enabled is false: anyone who reaches the engine reads, writes and deletes its indexes and "
            "sessions, and uses its LLM, without a key")
POLICY_OFF = ("spec.engine.networkPolicy.enabled is false: every pod of the cluster can reach the engine, not only "
              "its namespace")


def secure_defaults(spec: RAGEngineSpec) -> dict[str, Any]:
    """SecureDefaults: True while the engine requires its API key and its NetworkPolicy is on; False, with
    what is exposed, when the spec opts out of either. A warning, never a failure: it does not feed Ready."""
    off = [(flag, why) for flag, why in (("Auth", AUTH_OFF), ("NetworkPolicy", POLICY_OFF))
           if not (spec.auth.enabled if flag == "Auth" else spec.engine.network_policy.enabled)]
    if not off:
        return _cond(c.SECURE_DEFAULTS, True, "Secure",
                     "the engine requires its API key and admits only its NetworkPolicy's peers")
    reason = "And".join(flag for flag, _ in off) + "Disabled"
    return _cond(c.SECURE_DEFAULTS, False, reason, "; ".join(why for _, why in off))


MAX_INDEXES = 100  # status.indexes lists at most this many (the rest: the engine's GET /indexes/{name}/versions)


def indexes_status(health: dict[str, Any]) -> list[dict[str, Any]]:
    """status.indexes from the engine's /health: each index's live version, whether it uses the engine's
    current model, and a running re-index's progress."""
    out = []
    for name, entry in sorted((health.get("indexes") or {}).items())[:MAX_INDEXES]:
        item: dict[str, Any] = {"name": name, "version": entry.get("version"), "current": entry.get("current"),
                                "documents": entry.get("documents")}
        job = entry.get("reindex")
        if job:
            item.update(reindexVersion=job.get("version"), documentsDone=job.get("documents_done"),
                        documentsTotal=job.get("documents_total"))
        if entry.get("rejected"):
            item["rejectedVersion"] = entry["rejected"].get("version")
        out.append(item)
    return out


def reindexing(spec: RAGEngineSpec, observed: Observed) -> dict[str, Any] | None:
    """The Reindexing condition: True while the engine has not picked up spec.embedding yet or re-indexes to
    it (with each index's progress); False once every index uses it. Never feeds Ready: the old versions
    serve meanwhile. Unknown when a change is pending and the engine cannot be asked. None: not asked, and
    nothing pending (the previous condition stands)."""
    model = embedding_target(spec)[0]
    wanted = target_digest(spec)
    health = observed.engine_health
    if health is None:
        if observed.engine_health_error and observed.previous_embedding != wanted:
            return _cond(c.REINDEXING, False, "EngineUnreachable", f"cannot tell whether the engine re-indexes to "
                         f"{model}: {observed.engine_health_error}") | {"status": "Unknown"}
        return None
    if (health.get("embedding") or {}).get("target") != wanted:
        return _cond(c.REINDEXING, True, "Pending", f"waiting for the engine to load the embedding model {model} "
                     "(its ConfigMap reaches the pods within about a minute); the indexes serve with the current "
                     "model meanwhile")
    indexes = health.get("indexes") or {}
    running = [f"index {n}: version {e['reindex'].get('version')}, {e['reindex'].get('documents_done')} of "
               f"{e['reindex'].get('documents_total')} documents" for n, e in sorted(indexes.items()) if e.get("reindex")]
    if running:
        return _cond(c.REINDEXING, True, "Reindexing", f"re-indexing to {model}, the old versions serve meanwhile: "
                     + "; ".join(running))
    rejected = rejected_reason(health)
    if rejected:  # a gated re-index whose new version scored worse: the live version serves on
        return _cond(c.REINDEXING, False, "Rejected", rejected)
    stale = sorted(n for n, e in indexes.items() if e.get("current") is False)
    if stale:
        return _cond(c.REINDEXING, False, "NotCurrent", f"index(es) {', '.join(stale)} serve with another embedding "
                     f"model than {model} (a re-index failed, or was started through the API): GET "
                     "/indexes/<name>/reindex says why")
    return _cond(c.REINDEXING, False, "Current", f"every index uses the embedding model {model}")


def conditions_for(owner: Owner, spec: RAGEngineSpec | None, observed: Observed,
                   error: tuple[str, str] | None) -> list[dict]:
    """The six conditions (plus SourcesSynced with sources, GuardrailsPolicy with guardrails, Reindexing when
    the engine was asked or a change is pending), without timestamps. error = (reason, message) of a failed
    reconcile. An invalid spec gets the five that can be said without one (no SecureDefaults)."""
    if spec is None:  # invalid spec: nothing else can be said
        reason, message = error or ("InvalidSpec", "spec is invalid")
        return [
            _cond(c.READY, False, reason, message),
            _cond(c.INFERENCE_READY, False, reason, message),
            _cond(c.ENGINE_READY, False, reason, message),
            _cond(c.PROGRESSING, False, reason, message),
            _cond(c.DEGRADED, True, reason, message),
        ]
    states: dict[str, WorkloadState] = {}
    if spec.inference is None:
        inference = _cond(c.INFERENCE_READY, True, "NotRequired", "retrieval-only: no inference configured")
    elif not spec.runs_vllm:
        if observed.inference_unreachable:
            inference = _cond(c.INFERENCE_READY, False, "InferenceUnreachable", observed.inference_unreachable)
        else:
            inference = _cond(c.INFERENCE_READY, True, "ExternalEndpoint", f"using {spec.inference.url}")
    else:
        if spec.inference.replicas == 0 and spec.inference.autoscaling is None:
            inference = _cond(c.INFERENCE_READY, False, "ScaledToZero", "spec.inference.replicas is 0 (GPUs freed)")
        else:
            s = states[c.COMPONENT_INFERENCE] = inference_state(
                observed.deployments.get(c.COMPONENT_INFERENCE), observed.pods.get(c.COMPONENT_INFERENCE, []),
                observed.pod_events,
            )
            inference = _cond(c.INFERENCE_READY, s.state == AVAILABLE, s.reason, s.message)
    if spec.engine.replicas == 0 and spec.engine.autoscaling is None:
        engine = _cond(c.ENGINE_READY, False, "ScaledToZero", "spec.engine.replicas is 0")
    else:
        engine_pods = observed.pods.get(c.COMPONENT_ENGINE, [])
        s = states[c.COMPONENT_ENGINE] = workload_state(
            "engine", observed.deployments.get(c.COMPONENT_ENGINE), engine_pods, observed.pod_events,
        )
        if s.reason == "Unschedulable" and not spec.storage.vector_store.external and _serving(engine_pods):
            s = states[c.COMPONENT_ENGINE] = WorkloadState(s.state, s.reason, f"{s.message}; {FAISS_ROLL_STALLED}")
        if s.state == PROGRESSING and observed.engine_not_ready and s.reason != "Restarting":
            # the pods run but fail readiness: say which dependency, in the engine's own words
            s = states[c.COMPONENT_ENGINE] = WorkloadState(PROGRESSING, "EngineNotReady",
                                                           f"engine: {observed.engine_not_ready}")
        engine = _cond(c.ENGINE_READY, s.state == AVAILABLE, s.reason, s.message)
    failed = [s for s in states.values() if s.state == FAILED]
    policy = guardrails_condition(spec, policy_configmap_name(owner, spec), observed.guardrails_policy)
    rolling = [s for s in states.values() if s.state == PROGRESSING]
    if error:
        degraded = _cond(c.DEGRADED, True, *error)
    elif failed:
        degraded = _cond(c.DEGRADED, True, failed[0].reason, "; ".join(s.message for s in failed))
    elif inference["reason"] == "InferenceUnreachable":
        # An outage of the external LLM, not a step on the way: GitOps tools (Argo CD's health check, Flux's
        # failed expression in docs/operator.md) must show it, while the engine keeps serving what it can.
        degraded = _cond(c.DEGRADED, True, "InferenceUnreachable", f"{inference['message']}; the engine still "
                         "answers retrieval, and chat extractively")
    elif policy is not None and policy["status"] == "False":
        # The engine serves on its last good policy (or refuses, fail-closed): not what the spec declares.
        degraded = _cond(c.DEGRADED, True, "Guardrails" + policy["reason"], policy["message"])
    else:
        degraded = _cond(c.DEGRADED, False, "AsExpected", "no child reports a failure")
    progressing = (
        _cond(c.PROGRESSING, True, "RollingOut", "; ".join(s.message for s in rolling))
        if rolling
        else _cond(c.PROGRESSING, False, "Complete", "all children are up to date")
    )
    # vLLM scaled to zero on purpose is a state reached, not one awaited: the engine serves retrieval and
    # extractive answers (its readiness does not follow the LLM), so Ready holds.
    scaled_to_zero = inference["reason"] == "ScaledToZero"
    not_ready = [x for x in (inference, engine) if x["status"] != "True" and not (x is inference and scaled_to_zero)]
    if error:
        ready = _cond(c.READY, False, error[0], error[1])
    elif not_ready:
        ready = _cond(c.READY, False, not_ready[0]["reason"], "; ".join(x["message"] for x in not_ready))
    elif scaled_to_zero:
        ready = _cond(c.READY, True, "ScaledToZero", "the engine is available; vLLM is scaled to zero (retrieval and "
                      "extractive answers until it is scaled up)")
    else:
        ready = _cond(c.READY, True, "Available", "inference and engine are available")
    # SourcesSynced never feeds Ready: an engine whose source fails still serves what it has.
    sources = sources_condition(spec.sources, observed.sources)
    # Reindexing never feeds Ready either: the old versions serve while new ones are built.
    reindex = reindexing(spec, observed)
    extra = [x for x in (sources, policy, reindex) if x]
    return [ready, inference, engine, progressing, degraded, secure_defaults(spec), *extra]


def stamp(new: list[dict], old: list[dict], now: str, generation: int | None) -> list[dict]:
    """lastTransitionTime changes only when a condition's status flips (API conventions)."""
    previous = {x.get("type"): x for x in old or []}
    out = []
    for cond in new:
        prev = previous.get(cond["type"])
        keep = prev is not None and prev.get("status") == cond["status"] and prev.get("lastTransitionTime")
        stamped = {**cond, "lastTransitionTime": keep or now}
        if generation is not None:
            stamped["observedGeneration"] = generation
        out.append(stamped)
    return out


def transitions(new: list[dict], old: list[dict]) -> list[dict]:
    """Conditions whose status changed (or appeared), plus a Degraded=True whose reason or message
    changed (a new, distinct failure): each becomes one Event. A failure that repeats is not news."""
    previous = {x.get("type"): x for x in old or []}
    out = []
    for x in new:
        prev = previous.get(x["type"]) or {}
        flipped = prev.get("status") != x["status"]
        new_failure = (x["type"] == c.DEGRADED and x["status"] == "True"
                       and (prev.get("reason"), prev.get("message")) != (x["reason"], x["message"]))
        if flipped or new_failure:
            out.append(x)
    return out


def compute_status(
    owner: Owner,
    spec: RAGEngineSpec | None,
    generation: int | None,
    observed: Observed,
    old_conditions: list[dict],
    now: str,
    error: tuple[str, str] | None = None,
) -> tuple[dict[str, Any], list[dict]]:
    """-> (status patch, condition transitions)."""
    new = conditions_for(owner, spec, observed, error)
    if spec is not None and not any(x["type"] == c.REINDEXING for x in new):  # not asked: the last word stands
        new += [{k: v for k, v in x.items() if k not in ("lastTransitionTime", "observedGeneration")}
                for x in old_conditions or [] if x.get("type") == c.REINDEXING]
    conds = stamp(new, old_conditions, now, generation)
    status: dict[str, Any] = {"observedGeneration": generation, "conditions": conds, "endpoint": endpoint(owner)}
    if spec is not None:
        status["inferenceUrl"] = llm_url(owner, spec)
        status["model"] = served_model(spec)
        status["dataVolumeSize"] = observed.data_volume_size
        status["modelCacheVolumeSize"] = observed.model_cache_volume_size
        if observed.engine_health is not None:
            status["indexes"] = indexes_status(observed.engine_health)
            status["embeddingTarget"] = (observed.engine_health.get("embedding") or {}).get("target")
            status["evaluation"] = evaluation_status(observed.engine_health) or None
        else:
            status["indexes"], status["embeddingTarget"] = observed.previous_indexes, observed.previous_embedding
            status["evaluation"] = observed.previous_evaluation
        key = engine_api_key_ref(owner, spec.auth)
        status["apiKeySecretRef"] = {"name": key.name, "key": key.key} if key else None
        # the scale subresource reads these; None removes them (merge patch) when vLLM goes away
        status["inferenceReplicas"] = status["inferenceSelector"] = None
        if spec.runs_vllm:
            dep = observed.deployments.get(c.COMPONENT_INFERENCE) or {}
            status["inferenceReplicas"] = (dep.get("status") or {}).get("readyReplicas", 0)
            status["inferenceSelector"] = f"{c.SELECTOR_NAME}={owner.name},{c.SELECTOR_COMPONENT}={c.COMPONENT_INFERENCE}"
    return status, transitions(conds, old_conditions)


def degraded_by(failures: list[tuple[str, str, str]]) -> tuple[str, str] | None:
    """The (reason, message) for Degraded: the first failure's reason, every failing child named."""
    if not failures:
        return None
    return failures[0][0], "; ".join(f"{child}: {message}" for _, child, message in failures)


def pending_error(body: dict[str, Any]) -> tuple[str, str] | None:
    """The apply/spec error that the last reconcile reported for a generation it did not finish."""
    status = body.get("status") or {}
    if status.get("observedGeneration") == body["metadata"].get("generation"):
        return None
    for cond in status.get("conditions") or []:
        if cond.get("type") == c.DEGRADED and cond.get("status") == "True" and cond.get("reason") in SPEC_ERRORS:
            return cond["reason"], cond.get("message", "")
    return None


ACCESS_INVALID = "AccessInvalid"
# Every reason a reconcile reports for a generation it could not bring about (controller.py: reconcile(),
# _apply_children(), _apply_access()): a child's event keeps it (sync_status) until a reconcile of that generation succeeds.
SPEC_ERRORS = ("ApplyFailed", "InvalidSpec", "NameConflict", "DeleteFailed", ACCESS_INVALID, POLICY_VIOLATION)
