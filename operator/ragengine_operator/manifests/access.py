"""spec.access -> the engine's access file (a Secret the operator owns, mounted into the engine) and, for
ServiceAccount principals, the engine's own ServiceAccount and its ``system:auth-delegator`` binding.

- The file is rendered from the spec and the keys read from their Secrets (the controller reads them), and
  checked with the engine's own model (``ragengine.access.rules.AccessRules``), so the operator never writes
  a file the engine would refuse. Keys go in as their SHA-256 (``keySha256``): the rendered Secret holds
  no key.
- The Secret is mounted as a directory (a ``subPath`` mount never sees updates); the engine re-reads the file
  when the kubelet swaps it, so an edit reaches running engines without a restart. Nothing about the file
  enters the pod template's config hash: an access change never rolls the engine.
- ServiceAccount rules need TokenReview: the engine runs as ``<name>-engine``, an account the operator makes
  for it alone, with its token mounted, and a ClusterRoleBinding grants that account ``system:auth-delegator``.
  Never an account the tenant names (``spec.engine.serviceAccountName`` then does not apply, and the CRD
  refuses setting both): the cluster-wide role would reach every pod running as it. The binding is
  cluster-scoped, so it cannot have the RAGEngine as owner: it is labelled with the RAGEngine's namespace,
  name and uid, and the controller deletes it when the rules no longer need it or the RAGEngine is gone
  (``Controller.sweep_bindings``). Its name is a hash of namespace and name (``binding_name``): the readable
  ``ragengine-tokenreview-<namespace>-<name>`` of earlier releases collides (``team/a-kb`` and
  ``team-a/kb``), so one tenant could hold the name another's binding needs; those are deleted once the
  hashed one is applied (``legacy_binding_name``).
- ``spec.access.audience`` may not be the API server's own (``API_AUDIENCES``, and what the controller learns
  from the cluster: ``api_audience_refusal``): the engine would collect callers' tokens that open the API.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import yaml
from pydantic import ValidationError

from ragengine.access.rules import AccessRules
from ragengine.settings import EngineSettings
from ragengine.validation import validation_message

from .. import constants as c
from ..spec import RAGEngineSpec
from ..spec.access import AccessSpec
from .labels import Owner, labels, metadata

ACCESS_DIR = "/etc/ragengine/access"
ACCESS_FILE = "access.yaml"
MIN_KEY_CHARS = 16
LABEL_OWNER_NAMESPACE = f"{c.GROUP}/namespace"
LABEL_OWNER_UID = f"{c.GROUP}/uid"
COMPONENT_TOKENREVIEW = "tokenreview"


class AccessInputError(ValueError):
    """A key Secret or a namespace the rules name is missing or unusable; the message says which."""


def access_secret_name(owner: Owner) -> str:
    return owner.child("access")


def default_audience(owner: Owner) -> str:
    return f"{c.GROUP}/{owner.namespace}/{owner.name}"


def needs_token_review(spec: RAGEngineSpec) -> bool:
    return spec.access is not None and bool(spec.access.service_accounts)


def engine_account(owner: Owner) -> str:
    """The engine's ServiceAccount when it reviews tokens: one the operator makes for it alone."""
    return owner.child("engine")


def audience_refusal(owner: Owner, access: AccessSpec, api_audiences: frozenset[str]) -> str | None:
    """Why the rules' audience may not be used in this cluster (it is one the API server accepts), or None."""
    audience = access.audience or default_audience(owner)
    if access.service_accounts and audience in api_audiences:
        return (f"access.audience {audience!r} is this cluster's API server audience: callers would hand the engine "
                "tokens that open the API; choose another, such as the default ragengine.io/<namespace>/<name>")
    return None


def render_access(owner: Owner, access: AccessSpec, keys: dict[tuple[str, str], str]) -> str:
    """The access file (YAML). ``keys``: (Secret name, key) -> the key, as read from the Secrets."""
    def rule(r: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"indexes": list(r.indexes), "role": r.role}
        if r.groups:
            out["groups"] = list(r.groups)
        if r.limits is not None:
            out["limits"] = r.limits.model_dump(by_alias=True, exclude_none=True)
        return out

    data: dict[str, Any] = {"keys": []}
    for k in access.keys:
        ref = k.key_secret_ref
        value = keys[(ref.name, ref.key)]
        if len(value) < MIN_KEY_CHARS:
            raise AccessInputError(f"access.keys {k.name!r}: the key in Secret {ref.name} (key {ref.key}) is shorter "
                                   f"than {MIN_KEY_CHARS} characters")
        data["keys"].append({"name": k.name, "keySha256": hashlib.sha256(value.encode()).hexdigest(), **rule(k)})
    if access.service_accounts:
        data["serviceAccounts"] = [{"namespace": a.namespace, "name": a.name, **rule(a)} for a in access.service_accounts]
        data["audience"] = access.audience or default_audience(owner)
    if access.default_limits is not None:
        data["defaultLimits"] = access.default_limits.model_dump(by_alias=True, exclude_none=True)
    try:
        AccessRules.model_validate(data)
    except ValidationError as exc:
        raise AccessInputError(validation_message(exc, within="access", limit=None)) from None
    return yaml.safe_dump(data, sort_keys=True)


def access_secret(owner: Owner, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(owner, access_secret_name(owner), c.COMPONENT_ENGINE),
        "type": "Opaque",
        "data": {ACCESS_FILE: base64.b64encode(text.encode()).decode()},
    }


def engine_service_account(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": metadata(owner, owner.child("engine"), c.COMPONENT_ENGINE)}


def binding_name(owner: Owner) -> str:
    """A hash of namespace and name ('/' cannot be in either): no two RAGEngines share it."""
    return f"ragengine-tokenreview-{hashlib.sha256(f'{owner.namespace}/{owner.name}'.encode()).hexdigest()[:32]}"


def legacy_binding_name(owner: Owner) -> str:
    """The name earlier releases gave the binding (readable, and ambiguous): deleted when it is this RAGEngine's."""
    name = f"ragengine-tokenreview-{owner.namespace}-{owner.name}"
    return name if len(name) <= 253 else binding_name(owner)


def tokenreview_binding(owner: Owner, account: str) -> dict[str, Any]:
    """``system:auth-delegator`` (create TokenReviews and SubjectAccessReviews, nothing else) for the engine."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name(owner), "labels": {
            **labels(owner, c.COMPONENT_ENGINE), c.SELECTOR_COMPONENT: COMPONENT_TOKENREVIEW,
            LABEL_OWNER_NAMESPACE: owner.namespace, LABEL_OWNER_UID: owner.uid}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": owner.namespace}],
    }


def mount_access(pod: dict[str, Any], container: dict[str, Any], owner: Owner, spec: RAGEngineSpec) -> None:
    """The engine pod reads the access file (spec.access), and reviews tokens as its own ServiceAccount."""
    if spec.access is None:
        return
    pod["spec"].setdefault("volumes", []).append(
        {"name": "access", "secret": {"secretName": access_secret_name(owner), "defaultMode": 0o440}})
    container.setdefault("volumeMounts", []).append({"name": "access", "mountPath": ACCESS_DIR, "readOnly": True})
    container.setdefault("env", []).append(
        {"name": EngineSettings.env_name("access_file"), "value": f"{ACCESS_DIR}/{ACCESS_FILE}"})
    if needs_token_review(spec):
        pod["spec"]["serviceAccountName"] = engine_account(owner)  # over spec.engine.serviceAccountName
        pod["spec"]["automountServiceAccountToken"] = True  # its own token, for TokenReview only
