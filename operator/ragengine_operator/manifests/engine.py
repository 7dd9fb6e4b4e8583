"""spec -> the engine's Deployment, Service, index PVC and embedding ConfigMap."""

from __future__ import annotations

import copy
import json
from typing import Any

from .. import constants as c
from ..spec import RAGEngineSpec
from .access import mount_access
from .engine_env import TERMINATION_GRACE_S, embedding_file, engine_env, secret_refs
from .evaluation import mount_evaluation
from .guardrails import policy_mount, policy_volume
from .labels import (
    Owner,
    apply_pod_options,
    hpa,
    http_probe,
    http_service,
    merge_resources,
    metadata,
    pick,
    pvc,
    selector,
    stamp_template,
)
from .security import container_security_context, locked_down_pod

DEFAULT_RESOURCES = {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}
PRESTOP_DRAIN_S = 5  # the kubelet's sleep action: no binary needed in the image
UID = 1000  # images/engine.Dockerfile runs as this user; fsGroup makes the PVC writable for it
TMP_SIZE = "1Gi"  # the engine's /tmp (uploads in flight, library caches); the root filesystem is read-only


def engine_deployment_name(owner: Owner) -> str:
    return owner.child("engine")


def engine_service_name(owner: Owner) -> str:
    return owner.name  # the endpoint is http://<name>.<ns>.svc.<cluster domain>


def data_pvc_name(owner: Owner) -> str:
    return owner.child("data")


def embedding_configmap_name(owner: Owner) -> str:
    return owner.child("embedding")


def engine_embedding_configmap(owner: Owner, spec: RAGEngineSpec, generation: int | None) -> dict[str, Any]:
    """spec.embedding as the file the engine watches (embedding_file): mounted as a directory, so the kubelet
    swaps it in place when it changes and the engine re-indexes to the new model without a restart."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(owner, embedding_configmap_name(owner),
                                                                          c.COMPONENT_ENGINE),
            "data": {c.ENGINE_EMBEDDING_FILE: json.dumps(embedding_file(spec, generation), sort_keys=True)}}


def endpoint(owner: Owner) -> str:
    return f"http://{owner.service_host(engine_service_name(owner))}"


def engine_data_pvc(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    s = spec.storage.volume
    return pvc(owner, data_pvc_name(owner), c.COMPONENT_ENGINE, s.size, s.storage_class_name, "ReadWriteOnce",
               retain=s.reclaim_policy == "Retain")


def engine_deployment(owner: Owner, spec: RAGEngineSpec, secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """`secrets`: Secret name -> digest (controller-read); those the engine reads go into its config hash."""
    container: dict[str, Any] = {
        "name": "engine",
        "image": spec.engine.image or owner.engine_image,
        "command": ["ragengine", "serve", "--host", "0.0.0.0", "--port", str(c.ENGINE_PORT), "--data-dir", c.ENGINE_DATA_DIR],
        "ports": [{"name": "http", "containerPort": c.ENGINE_PORT, "protocol": "TCP"}],
        # A read-only root: what is not /data (indexes, models) is scratch in an emptyDir /tmp, HOME included.
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "XDG_CACHE_HOME", "value": "/tmp/.cache"},
                *engine_env(owner, spec)],
        "resources": merge_resources(DEFAULT_RESOURCES, spec.engine.resources),
        "volumeMounts": [{"name": "data", "mountPath": c.ENGINE_DATA_DIR}, {"name": "tmp", "mountPath": "/tmp"},
                         {"name": "embedding", "mountPath": c.ENGINE_EMBEDDING_DIR, "readOnly": True}],
        # startup covers loading the embedding model (first start may download it into /data/models).
        "startupProbe": http_probe("/health", "http", period=5, failures=120),
        # Readiness means "can answer": LLM serving the model, embeddings, index store (GET /ready).
        # Liveness stays shallow: a dead LLM must not restart the engine.
        "readinessProbe": http_probe("/ready", "http", period=5, failures=3),
        "livenessProbe": http_probe("/health", "http", period=10, failures=6),
        "securityContext": {**container_security_context(), "readOnlyRootFilesystem": True},
        # A stopping pod leaves the Service's endpoints while kube-proxy (on every node) catches up: it keeps
        # serving meanwhile, so a rolling update drops no request (measured on the real node: without it,
        # 1 of 745 requests of a client looping through the Service failed with a refused connection).
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_DRAIN_S}}},
    }
    volumes: list[dict[str, Any]] = [
        # External store: no index on the pod, /data is scratch (model cache, temp files).
        {"name": "data", "emptyDir": {}} if spec.storage.vector_store.external else
        {"name": "data", "persistentVolumeClaim": {"claimName": data_pvc_name(owner)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
        # a directory (no subPath): the kubelet updates it in place when spec.embedding changes
        {"name": "embedding", "configMap": {"name": embedding_configmap_name(owner)}}]
    if spec.guardrails.enabled:  # the policy ConfigMap as a directory: the kubelet updates it in place
        volumes.append(policy_volume(owner, spec))
        container["volumeMounts"].append(policy_mount())
    pod = {
        "metadata": {"labels": metadata(owner, "", c.COMPONENT_ENGINE)["labels"]},
        "spec": {
            "containers": [container],
            "volumes": volumes,
            "terminationGracePeriodSeconds": TERMINATION_GRACE_S,  # preStop, drain, final snapshot
            **locked_down_pod(UID),
        },
    }
    eng = spec.engine
    if eng.node_selector:
        pod["spec"]["nodeSelector"] = dict(eng.node_selector)
    if eng.tolerations:
        pod["spec"]["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in eng.tolerations]
    apply_pod_options(pod, container, eng)
    if not spec.storage.vector_store.external:
        beside_the_volume(pod, owner)
    mount_access(pod, container, owner, spec)  # spec.access: the access file (and a ServiceAccount for TokenReview)
    mount_evaluation(pod, container, owner, spec)  # spec.evaluation: the evaluation file and the golden set
    template = stamp_template(pod, pick(secrets, {ref.name for ref in secret_refs(spec, owner).values()}))
    dep_spec: dict[str, Any] = {
        # One new pod in before an old one goes. External store: stateless replicas. faiss: the new pod starts
        # beside the old one on its node (beside_the_volume) as a stand-by that serves reads, and takes the
        # index volume over once the old one has stopped (ragengine/handover.py): no gap (issue 48).
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "revisionHistoryLimit": 3,
        "selector": {"matchLabels": selector(owner, c.COMPONENT_ENGINE)},
        "template": template,
    }
    if spec.engine.autoscaling is None:
        # With an HPA the field is left out of our apply: the HPA owns it and we never revert it.
        dep_spec = {"replicas": spec.engine.replicas, **dep_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(owner, engine_deployment_name(owner), c.COMPONENT_ENGINE),
        "spec": dep_spec,
    }


def beside_the_volume(pod: dict[str, Any], owner: Owner) -> None:
    """faiss: a new engine pod must land on the node of the pod it replaces. The index volume is ReadWriteOnce
    (mounted on one node at a time; ReadWriteOncePod would admit one pod, and the surge pod would wait for the
    old one forever), and the engines' writer lock is a flock, which holds within one node's kernel. So a
    required podAffinity to this RAGEngine's own engine pods, per node (added to spec.engine.affinity). The
    first pod has none to join: "If the current Pod being scheduled is the first in a series that have
    affinity to themselves, it is allowed to be scheduled if it passes all other affinity checks" (Kubernetes,
    Assigning Pods to Nodes: https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/
    #scheduling-a-group-of-pods-with-inter-pod-affinity-to-themselves), as after a node failure, once the lost
    pod is deleted. A node with no room for the surge pod stalls the roll; the old pod serves meanwhile."""
    affinity = pod["spec"]["affinity"] = copy.deepcopy(pod["spec"].get("affinity") or {})
    terms = affinity.setdefault("podAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
    terms.append({"labelSelector": {"matchLabels": selector(owner, c.COMPONENT_ENGINE)},
                  "topologyKey": "kubernetes.io/hostname"})


def engine_pdb(owner: Owner) -> dict[str, Any]:
    """At most one engine pod voluntarily evicted at a time (node drains keep the service up)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(owner, engine_deployment_name(owner), c.COMPONENT_ENGINE),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(owner, c.COMPONENT_ENGINE)}},
    }


def engine_hpa(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    assert spec.engine.autoscaling is not None
    return hpa(owner, engine_deployment_name(owner), c.COMPONENT_ENGINE, spec.engine.autoscaling)


def sync_pods_peer(owner: Owner) -> dict[str, Any]:
    """This RAGEngine's source-sync pods (Jobs in its namespace, manifests/sync_job.py): always admitted,
    since they push the sources' documents through the engine's API."""
    return {"podSelector": {"matchLabels": selector(owner, c.COMPONENT_SYNC)}}


def engine_network_policy(owner: Owner, spec: RAGEngineSpec) -> dict[str, Any]:
    """Only spec.engine.networkPolicy.allowFrom (by default: the RAGEngine's namespace) and this RAGEngine's
    source syncs reach the engine's port. The operator is not a peer: it never calls an engine (syncs run
    in the tenant's namespace), so a shared operator cannot relay between tenants. Ingress only: the
    engine's own calls (LLM, embeddings, store) are not restricted here."""
    policy = spec.engine.network_policy
    peers = [peer.model_dump(by_alias=True, exclude_none=True) for peer in policy.allow_from]
    peers.append(sync_pods_peer(owner))
    if spec.backup is not None:  # the backup CronJob's pods export every index through the API
        peers.append({"podSelector": {"matchLabels": selector(owner, c.COMPONENT_BACKUP)}})
    if spec.observability.metrics is not None:  # Prometheus scrapes /metrics on the same port
        peers += [peer.model_dump(by_alias=True, exclude_none=True) for peer in spec.observability.metrics.scrape_from]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(owner, engine_deployment_name(owner), c.COMPONENT_ENGINE),
        "spec": {
            "podSelector": {"matchLabels": selector(owner, c.COMPONENT_ENGINE)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"port": c.ENGINE_PORT, "protocol": "TCP"}]}],
        },
    }


def engine_service(owner: Owner) -> dict[str, Any]:
    return http_service(owner, engine_service_name(owner), c.COMPONENT_ENGINE, c.ENGINE_SERVICE_PORT)
