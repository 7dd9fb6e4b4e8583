"""Read what status is computed from: the child Deployments, their pods when something is wrong,
the kubelet's mount-failure Events of stuck pods, (url mode) whether the external LLM answers, and what the
engine says of itself (``/health``: its indexes; ``/ready`` of an unready pod: why).

The engine's image is the tenant's to choose, so the engine is as untrusted as the LLM's URL: every call to
it runs under one total deadline and a byte cap (net/http.py). A body larger than the cap is refused after
the cap, not read whole (one engine answering 1.6 GB took the operator from 60 to 1,660 MiB), and one that
trickles a byte a second is cut at the deadline (it held a reconcile, and the worker thread running it, for
as long as it kept trickling: 16 such engines stalled every tenant's reconciles).
"""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes.dynamic import DynamicClient

from .. import constants as c
from ..manifests.engine import data_pvc_name, engine_deployment_name
from ..manifests.engine_env import served_model
from ..manifests.guardrails import POLICY_KEY, policy_configmap_name
from ..manifests.inference import inference_name, model_cache_pvc_name
from ..manifests.labels import Owner
from ..net.egress import EgressPolicy
from ..net.http import Deadline, FetchError, TooLarge, pinned_get, read_body, request
from ..reconcile.status import Observed
from ..reconcile.workloads import container_failure
from ..settings import OperatorSettings
from ..spec import RAGEngineSpec
from .apply import get, list_objects

MOUNT_FAILURES = ("FailedMount", "FailedAttachVolume")  # incl. Multi-Attach errors
PROBE_TIMEOUT_SECONDS = 3.0
PROBE_CACHE_SECONDS = 10.0
PROBE_MAX_BYTES = 1024 * 1024
ENGINE_PROBE_TIMEOUT_SECONDS = 1.0  # GET /ready of one pod, the whole call
READY_MAX_BYTES = 64 * 1024  # {"status": ..., "reason": ...}
PODS_ASKED = 3  # unready pods asked why, at most, per status
_probe_cache: dict[tuple[str, str | None], tuple[float, str | None]] = {}


def _requested(pvc: dict[str, Any] | None) -> str | None:
    if pvc is None:
        return None
    size = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    return str(size) if size is not None else None


def _settled(dep: dict[str, Any]) -> bool:
    """All wanted replicas are updated and available: the pods have nothing to explain."""
    st, want = dep.get("status") or {}, (dep.get("spec") or {}).get("replicas", 1)
    return st.get("availableReplicas", 0) >= want and st.get("updatedReplicas", 0) >= want


def _stuck_creating(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    waiting = [((s.get("state") or {}).get("waiting") or {}).get("reason") for s in statuses]
    return pod.get("status", {}).get("phase") == "Pending" and (not statuses or "ContainerCreating" in waiting)


def mount_failures(dyn: DynamicClient, namespace: str, pods: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for pod in pods:
        if not _stuck_creating(pod):
            continue
        name = pod["metadata"]["name"]
        events = list_objects(dyn, "v1", "Event", namespace, selector="",
                              field_selector=f"involvedObject.kind=Pod,involvedObject.name={name},type=Warning")
        bad = [e for e in events if e.get("reason") in MOUNT_FAILURES]
        if bad:
            last = max(bad, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
            out[name] = (last["reason"], last.get("message", ""))
    return out


def _running_unready(pod: dict[str, Any]) -> bool:
    st = pod.get("status") or {}
    ready = {x.get("type"): x.get("status") for x in st.get("conditions") or []}.get("Ready")
    return st.get("phase") == "Running" and ready == "False" and bool(st.get("podIP"))


def _pod_url(pod: dict[str, Any], path: str) -> str:
    ip = pod["status"]["podIP"]
    return f"http://{f'[{ip}]' if ':' in ip else ip}:{c.ENGINE_PORT}{path}"


def engine_readiness_reason(pods: list[dict[str, Any]]) -> str | None:
    """The `reason` of GET /ready of a running, unready engine pod (what its readiness probe sees).

    The kubelet's probe result carries no body, so the operator asks the pod itself (best effort, at most
    ``PODS_ASKED`` pods, each call 1 s in all and 64 KiB): e.g. "the index store did not answer" or "LLM at
    ... is unreachable".
    """
    asked = 0
    for pod in pods:
        if asked >= PODS_ASKED or not _running_unready(pod) or container_failure([pod]):
            continue
        asked += 1
        try:
            reply = request("GET", _pod_url(pod, "/ready"), timeout_s=ENGINE_PROBE_TIMEOUT_SECONDS,
                            max_bytes=READY_MAX_BYTES)
            if reply.status_code == 503:
                return str(reply.json().get("reason") or "GET /ready answered 503")[:1024]
        except (FetchError, TooLarge, ValueError, AttributeError):
            continue
    return None


HEALTH_TIMEOUT_SECONDS = 2.0  # the whole call: resolving, connecting, the answer
HEALTH_MAX_BYTES = 1024 * 1024  # about 3,000 indexes' entries; status.indexes lists 100


def engine_health(url: str, key: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(the engine's GET /health, None) or (None, why not): how its indexes stand (versions, re-indexes, its
    target model's digest). ``key``: that engine's status key (manifests/status_key.py), without which an
    engine that requires its key names no index. Where the engine's NetworkPolicy does not admit the
    operator's namespace it times out (docs/versions.md). One deadline and one byte cap for the whole call."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    target = url.rstrip("/") + "/health"
    try:
        reply = request("GET", target, timeout_s=HEALTH_TIMEOUT_SECONDS, max_bytes=HEALTH_MAX_BYTES, headers=headers)
        body = reply.json()
    except (FetchError, TooLarge, ValueError) as exc:
        return None, f"GET {target} failed: {type(exc).__name__}: {exc}"[:512]
    if reply.status_code != 200 or not isinstance(body, dict) or "indexes" not in body:
        return None, f"GET {target} answered HTTP {reply.status_code} without the indexes"
    return body, None


def probe_egress(settings: OperatorSettings) -> EgressPolicy:
    """The sources' egress rules, plus the cluster's Service names (``*.svc``, ``*.svc.<domain>``): the LLM is
    usually one, and a GET of its /models through a Service is no more than any pod may do. Loopback, link-local
    (cloud metadata) and private address literals stay refused."""
    domain = settings.cluster_domain.strip(".")
    return EgressPolicy.build([*settings.sources_egress_allow, "*.svc", f"*.svc.{domain}"],
                              settings.sources_cluster_cidrs, settings.cluster_domain)


def probe_llm(url: str, model: str | None, egress: EgressPolicy | None = None) -> str | None:
    """None when `GET {url}/models` answers (and lists `model` when it can be read); else the reason.

    A 401/403 means the server is there but wants the key the engine holds: reachable. Cached for
    a few seconds so child events and resyncs do not hammer the endpoint. The URL is the tenant's, so
    the probe obeys the sources' egress rules (pinned address, bounded body): a host they refuse is not
    probed at all (None: nothing is claimed), or the probe's answers would map the operator's network. A
    name that does not resolve is reported (DNS answers any pod of the cluster alike), and ``probe_egress``
    opens in-cluster Service names, where an OpenAI-compatible server usually runs.
    """
    key, now = (url, model), time.monotonic()
    hit = _probe_cache.get(key)
    if hit and now - hit[0] < PROBE_CACHE_SECONDS:
        return hit[1]
    reason: str | None = None
    target = url.rstrip("/") + "/models"
    try:
        with pinned_get(target, egress or EgressPolicy(), Deadline(PROBE_TIMEOUT_SECONDS),
                        follow_redirects=False, timeout=PROBE_TIMEOUT_SECONDS) as (_, resp):
            if resp.status_code in (401, 403):
                reason = None
            elif resp.status_code >= 400:
                reason = f"inference URL {url} answered GET /models with HTTP {resp.status_code}"
            elif model and resp.status_code < 300:
                listing = json.loads(read_body(resp, PROBE_MAX_BYTES, Deadline(PROBE_TIMEOUT_SECONDS)))
                served = [m.get("id") for m in (listing.get("data") or []) if isinstance(m, dict)]
                if served and model not in served:
                    reason = f"inference URL {url} does not serve model {model!r} (it serves {', '.join(map(str, served))})"
    except FetchError as exc:
        refused = "refused by the egress policy" in str(exc) and not str(exc).endswith("does not resolve")
        reason = None if refused else f"inference URL {url} is unreachable: {exc}"[:512]
    except (TooLarge, ValueError, AttributeError) as exc:
        reason = f"inference URL {url} answered GET /models with an unreadable list: {type(exc).__name__}"
    _probe_cache[key] = (now, reason)
    return reason


def observe(dyn: DynamicClient, owner: Owner, spec: RAGEngineSpec | None, probe_external: bool = True,
            probe_engine: bool = True, egress: EgressPolicy | None = None) -> Observed:
    obs = Observed()
    if spec is None:
        return obs
    wanted = {c.COMPONENT_ENGINE: engine_deployment_name(owner)}
    if spec.runs_vllm:
        wanted[c.COMPONENT_INFERENCE] = inference_name(owner)
    elif spec.inference is not None and spec.inference.url and probe_external:
        obs.inference_unreachable = probe_llm(spec.inference.url, served_model(spec), egress)
    if spec.guardrails.enabled:  # a ConfigMap edit is seen at the next resync (or any reconcile)
        cm = get(dyn, "v1", "ConfigMap", owner.namespace, policy_configmap_name(owner, spec))
        obs.guardrails_policy = ((cm or {}).get("data") or {}).get(POLICY_KEY)
    obs.data_volume_size = _requested(get(dyn, "v1", "PersistentVolumeClaim", owner.namespace, data_pvc_name(owner)))
    if spec.runs_vllm:
        obs.model_cache_volume_size = _requested(
            get(dyn, "v1", "PersistentVolumeClaim", owner.namespace, model_cache_pvc_name(owner)))
    for component, name in wanted.items():
        dep = get(dyn, "apps/v1", "Deployment", owner.namespace, name)
        obs.deployments[component] = dep
        if dep is not None and not _settled(dep):  # pods only matter to explain why it is not available
            selector = f"{c.SELECTOR_NAME}={owner.name},{c.SELECTOR_COMPONENT}={component}"
            pods = list_objects(dyn, "v1", "Pod", owner.namespace, selector)
            obs.pods[component] = pods
            obs.pod_events.update(mount_failures(dyn, owner.namespace, pods))
            if component == c.COMPONENT_ENGINE and probe_engine:
                obs.engine_not_ready = engine_readiness_reason(pods)
    return obs
