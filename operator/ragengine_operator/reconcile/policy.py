"""What the operator lets a RAGEngine ask for, beyond what the API server validates. Pure.

Contract of ``refusals(spec, policy)``: the list of fields the spec sets that the operator's policy
(settings: ``allowed_images``, ``allow_service_account_name``, ``allow_priority_class_name``,
``allow_runtime_class_name``, ``allow_env_value_from``) does not allow, each named by its spec path and
the setting that refuses it. Empty means the spec may be applied. The operator's own default images
are always allowed (the operator's administrator chose them); only an image the spec names is checked,
against shell-style globs (``ghcr.io/acme/*``). A refused spec is applied not at all (its children
keep what they had), and is reported as ``Degraded=True, reason PolicyViolation`` with an Event.

Why: whoever may edit a RAGEngine makes the operator create pods in that namespace, with the images,
ServiceAccount, priority and Secret-backed env the spec names (docs/operator.md, "What editing a
RAGEngine grants"). These settings let a platform team narrow that to what tenants need.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from ..spec import PodOptions, RAGEngineSpec

POLICY_VIOLATION = "PolicyViolation"


@dataclass(frozen=True)
class Policy:
    allowed_images: tuple[str, ...] = ()  # globs; empty: any image
    allow_service_account_name: bool = True
    allow_priority_class_name: bool = True
    allow_runtime_class_name: bool = True
    allow_env_value_from: bool = True

    @classmethod
    def from_settings(cls, settings: object) -> Policy:
        return cls(tuple(getattr(settings, "allowed_images", ())),
                   *(getattr(settings, f"allow_{x}") for x in ("service_account_name", "priority_class_name",
                                                              "runtime_class_name", "env_value_from")))


_FIELDS = (("service_account_name", "serviceAccountName", "allowServiceAccountName"),
           ("priority_class_name", "priorityClassName", "allowPriorityClassName"),
           ("runtime_class_name", "runtimeClassName", "allowRuntimeClassName"))


def _pod_refusals(path: str, opts: PodOptions, policy: Policy) -> list[str]:
    out = []
    for field, name, setting in _FIELDS:
        if getattr(opts, field) is not None and not getattr(policy, f"allow_{field}"):
            out.append(f"spec.{path}.{name} is not allowed by the operator's policy ({setting}: false)")
    if not policy.allow_env_value_from:
        named = [e.name for e in opts.env or [] if e.value_from is not None]
        if named:
            out.append(f"spec.{path}.env[].valueFrom ({', '.join(named)}) is not allowed by the operator's policy "
                       "(allowEnvValueFrom: false)")
    image = getattr(opts, "image", None)
    if image is not None and policy.allowed_images and not any(fnmatchcase(image, g) for g in policy.allowed_images):
        out.append(f"spec.{path}.image {image!r} is not allowed by the operator's policy (allowedImages: "
                   f"{', '.join(policy.allowed_images)})")
    return out


def refusals(spec: RAGEngineSpec, policy: Policy) -> list[str]:
    out = _pod_refusals("engine", spec.engine, policy)
    if spec.inference is not None:
        out += _pod_refusals("inference", spec.inference, policy)
    return out
