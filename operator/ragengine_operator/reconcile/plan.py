"""spec -> the objects to apply and the ones to delete. Pure: the same spec gives the same plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import constants as c
from ..manifests.access import (
    binding_name,
    engine_service_account,
    needs_token_review,
    tokenreview_binding,
)
from ..manifests.access import engine_account as access_account
from ..manifests.backup import backup_cronjob, backup_name, backup_pvc
from ..manifests.engine import (
    data_pvc_name,
    engine_data_pvc,
    engine_deployment,
    engine_deployment_name,
    engine_embedding_configmap,
    engine_hpa,
    engine_network_policy,
    engine_pdb,
    engine_service,
)
from ..manifests.engine_env import generated_key_refs, inference_api_key_ref, secret_refs
from ..manifests.evaluation import engine_evaluation_configmap, evaluation_configmap_name
from ..manifests.guardrails import default_configmap_name, default_policy_configmap, packaged_default_policy
from ..manifests.inference import (
    inference_deployment,
    inference_hpa,
    inference_name,
    inference_network_policy,
    inference_scaled_object,
    inference_service,
    model_cache_pvc,
)
from ..manifests.labels import Owner, key_secret
from ..manifests.monitoring import KINDS, MONITORING_API, monitors
from ..spec import RAGEngineSpec, SecretKeyRef

KEDA_API = "keda.sh/v1alpha1"
OPTIONAL_APIS = frozenset({MONITORING_API, KEDA_API})  # add-ons' CRDs: a cluster may not serve them
OWNS_PODS = frozenset({"Deployment", "StatefulSet", "CronJob", "Job"})  # deleted in the foreground


@dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    name: str
    # A kind from an add-on's CRD (Prometheus operator, KEDA): where the cluster does not serve it there is
    # nothing to delete, and the controller does not ask.
    optional: bool = False

    @property
    def propagation(self) -> str:
        """Foreground where the object owns what runs (a Deployment's pods go before it); Background for
        the rest, which own nothing: a foreground delete waits for the garbage collector, which watches a
        kind installed a moment ago (a ServiceMonitor CRD) only after its next discovery, up to 30 s on."""
        return "Foreground" if self.kind in OWNS_PODS else "Background"


@dataclass
class Plan:
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete: list[Ref] = field(default_factory=list)

    def names(self) -> list[str]:
        return [f"{o['kind']}/{o['metadata']['name']}" for o in self.apply]


def plan(owner: Owner, spec: RAGEngineSpec, secrets: dict[str, str] | None = None,
         default_policy: str | None = None, embedding_generation: int | None = None) -> Plan:
    """Volumes first (pods reference them), then workloads, then Services. `secrets` maps the names of
    the Secrets the pods read to a digest of their data (see referenced_secrets): a change rolls them.
    `embedding_generation`: the generation in the engine's embedding file (engine_env.embedding_generation)."""
    p = Plan()
    vllm = inference_name(owner)
    hpa_ref = Ref("autoscaling/v2", "HorizontalPodAutoscaler", vllm)
    scaled_ref = Ref(KEDA_API, "ScaledObject", vllm, optional=True)
    if spec.runs_vllm:
        p.apply += [model_cache_pvc(owner, spec), inference_deployment(owner, spec, secrets), inference_service(owner),
                    inference_network_policy(owner, spec)]
        autoscaling = spec.inference.autoscaling  # type: ignore[union-attr]
        if autoscaling is not None and autoscaling.keda is not None:
            p.apply.append(inference_scaled_object(owner, spec))  # KEDA makes its own HPA (keda-hpa-<name>)
            p.delete.append(hpa_ref)
        elif autoscaling is not None:
            p.apply.append(inference_hpa(owner, spec))
            p.delete.append(scaled_ref)
        else:
            p.delete += [hpa_ref, scaled_ref]
    else:
        # URL mode or retrieval-only: no vLLM. The model-cache PVC stays (owned, so it goes with the
        # RAGEngine) to spare a re-download when switching back.
        p.delete += [Ref("apps/v1", "Deployment", vllm), Ref("v1", "Service", vllm),
                     Ref("networking.k8s.io/v1", "NetworkPolicy", vllm), hpa_ref, scaled_ref]
    external = spec.storage.vector_store.external
    # faiss: the index volume. External store: none (a faiss PVC left from before stays, owned, with
    # its data, until the RAGEngine goes: switching back finds it).
    if not external:
        p.apply.append(engine_data_pvc(owner, spec))
    # spec.embedding as a file the engine watches (not env): a new model re-indexes, the pods stay.
    p.apply.append(engine_embedding_configmap(owner, spec, embedding_generation))
    # spec.guardrails without a ConfigMap: the chart's default policy in one of our own (KAITO copies a
    # template into the namespace, shared and unowned; ours is owned and goes with the RAGEngine)
    if spec.guardrails.enabled and spec.guardrails.config_map_ref is None:
        p.apply.append(default_policy_configmap(owner, default_policy or packaged_default_policy()))
    else:
        p.delete.append(Ref("v1", "ConfigMap", default_configmap_name(owner)))
    # spec.evaluation: the engine's evaluation file, watched like the embedding file
    if spec.evaluation is not None:
        p.apply.append(engine_evaluation_configmap(owner, spec))
    else:
        p.delete.append(Ref("v1", "ConfigMap", evaluation_configmap_name(owner)))
    p.apply += [engine_deployment(owner, spec, secrets), engine_service(owner)]
    engine = engine_deployment_name(owner)
    if external:
        p.apply.append(engine_pdb(owner))
    else:
        p.delete.append(Ref("policy/v1", "PodDisruptionBudget", engine))
    if spec.engine.autoscaling is not None:
        p.apply.append(engine_hpa(owner, spec))
    else:
        p.delete.append(Ref("autoscaling/v2", "HorizontalPodAutoscaler", engine))
    # spec.access: the access Secret is the controller's to apply (it reads the keys); the rest is planned here.
    # Without spec.access the Secret stays, unmounted, until the RAGEngine goes (the operator may not delete
    # Secrets: least privilege), as the model cache stays in URL mode.
    if needs_token_review(spec):  # the engine's own account, whatever spec.engine.serviceAccountName says
        p.apply.insert(0, engine_service_account(owner))  # before the Deployment that runs as it
        p.apply.append(tokenreview_binding(owner, access_account(owner)))
    else:
        p.delete.append(Ref("v1", "ServiceAccount", owner.child("engine")))
        p.delete.append(Ref("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", binding_name(owner)))
    # (a binding under an earlier release's name is the sweep's: kube/bindings.py)
    # On unless opted out (SecureDefaults then says so): the namespace and the source syncs get in.
    if spec.engine.network_policy.enabled:
        p.apply.append(engine_network_policy(owner, spec))
    else:
        p.delete.append(Ref("networking.k8s.io/v1", "NetworkPolicy", engine))
    # Monitors: the wanted kind for each component with metrics; every other monitor this RAGEngine may
    # have made goes (the other kind, vLLM's after a switch to url mode, all of them with monitoring unset).
    wanted = monitors(owner, spec) if spec.observability.metrics is not None else []
    p.apply += wanted
    keep = {(m["kind"], m["metadata"]["name"]) for m in wanted}
    names = [engine, vllm]
    p.delete += [Ref(MONITORING_API, kind, name, optional=True) for kind in KINDS for name in names
                 if (kind, name) not in keep]
    # Backups: the CronJob goes with spec.backup; its volume stays (it holds the backups).
    if spec.backup is not None:
        p.apply += ([backup_pvc(owner, spec)] if spec.backup.volume.claim_name is None else []) + [backup_cronjob(owner, spec)]
    else:
        p.delete.append(Ref("batch/v1", "CronJob", backup_name(owner)))
    assert data_pvc_name(owner) not in {r.name for r in p.delete}  # never delete an index volume
    return p


def controller_uid(obj: dict[str, Any]) -> str | None:
    """uid of the object's controlling owner (the ownerReference with controller: true), if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def labelled_child(existing: dict[str, Any], owner: Owner) -> bool:
    """A cluster-scoped child (the TokenReview binding), which cannot have an owner reference: ours when its
    labels name a RAGEngine of this namespace and name (one of an earlier incarnation is adopted, as a retained
    claim is; its uid label is what the clean-up of deleted RAGEngines goes by)."""
    from ..manifests.access import LABEL_OWNER_NAMESPACE

    labels = (existing.get("metadata") or {}).get("labels") or {}
    return (not existing["metadata"].get("namespace") and labels.get(c.LABEL_MANAGED_BY) == c.FIELD_MANAGER
            and labels.get(c.SELECTOR_NAME) == owner.name and labels.get(LABEL_OWNER_NAMESPACE) == owner.namespace)


def retained_claim(existing: dict[str, Any], owner: Owner) -> bool:
    """A PVC this operator made for a RAGEngine of this name with reclaimPolicy Retain (no owner):
    a RAGEngine created again under the name adopts it, data and all."""
    labels = (existing.get("metadata") or {}).get("labels") or {}
    return (existing.get("kind") == "PersistentVolumeClaim" and labels.get(c.SELECTOR_NAME) == owner.name
            and labels.get(c.LABEL_MANAGED_BY) == c.FIELD_MANAGER)


def name_conflict(existing: dict[str, Any] | None, owner: Owner) -> str | None:
    """Why `existing` must be neither adopted nor deleted by this RAGEngine; None when it is ours (or absent).

    Ours means controlled by this very RAGEngine (uid, not name: a RAGEngine re-created under the
    same name is another object, and the garbage collector takes the old one's children).
    """
    if existing is None:
        return None
    uid = controller_uid(existing)
    if uid == owner.uid or (uid is None and (retained_claim(existing, owner) or labelled_child(existing, owner))):
        return None
    kind, name = existing.get("kind", "object"), existing["metadata"]["name"]
    if uid is None:
        return f"{kind} {name} exists and is not controlled by this RAGEngine; rename or delete it"
    ref = next(r for r in existing["metadata"]["ownerReferences"] if r.get("controller"))
    return f"{kind} {name} exists and is controlled by {ref.get('kind')} {ref.get('name')} (uid {uid})"


def generated_key_secret(owner: Owner, ref: SecretKeyRef, value: str) -> dict[str, Any]:
    """The Secret of one operator-generated key (engine_env.generated_key_refs) holding `value`."""
    component = c.COMPONENT_INFERENCE if ref == inference_api_key_ref(owner) else c.COMPONENT_ENGINE
    return key_secret(owner, ref.name, ref.key, component, value)


def referenced_secrets(owner: Owner, spec: RAGEngineSpec) -> set[str]:
    """Names of every Secret the engine's and vLLM's env read (the controller digests them)."""
    names = {ref.name for ref in secret_refs(spec, owner).values()} | {r.name for r in generated_key_refs(owner, spec)}
    if spec.runs_vllm and spec.inference.hf_token_secret_ref:  # type: ignore[union-attr]
        names.add(spec.inference.hf_token_secret_ref.name)  # type: ignore[union-attr]
    return names
