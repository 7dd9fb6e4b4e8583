"""spec.access → the engine's access file (rendered, checked with the engine's own model, keys only as
SHA-256), the Deployment that mounts it (an access edit never changes the pod template: no roll), and the
ServiceAccount + TokenReview binding that ServiceAccount principals need."""

from __future__ import annotations

import base64
import hashlib

import pytest
import yaml
from pydantic import ValidationError

from ragengine.access.rules import AccessRules
from ragengine.settings import EngineSettings
from ragengine_operator import constants as c
from ragengine_operator.manifests.access import (
    AccessInputError,
    access_secret,
    default_audience,
    render_access,
    tokenreview_binding,
)
from ragengine_operator.manifests.engine import engine_deployment
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.reconcile.plan import name_conflict, plan
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("team-a", "docs", "uid-1", engine_image="engine:1")
KEY = "a-key-of-app-a-0123456789"
ACCESS = {
    "keys": [{"name": "app-a", "keySecretRef": {"name": "app-a-key"}, "indexes": ["team-a-*"], "role": "read",
              "groups": ["ops"], "limits": {"requestsPerMinute": 60}}],
    "serviceAccounts": [{"namespace": "shop", "name": "frontend", "indexes": ["catalog"], "role": "read"}],
    "defaultLimits": {"tokensPerMinute": 20000},
}


def spec(access: dict | None = ACCESS, **extra) -> RAGEngineSpec:
    return RAGEngineSpec.model_validate({**({"access": access} if access is not None else {}), **extra})


def test_the_rendered_file_is_what_the_engine_accepts_and_holds_no_key():
    text = render_access(OWNER, spec().access, {("app-a-key", "key"): KEY})
    assert KEY not in text
    data = yaml.safe_load(text)
    assert data["keys"][0]["keySha256"] == hashlib.sha256(KEY.encode()).hexdigest()
    assert data["audience"] == default_audience(OWNER) == "ragengine.io/team-a/docs"
    rules = AccessRules.model_validate(data)
    assert rules.keys[0].limits.requests_per_minute == 60 and rules.default_limits.tokens_per_minute == 20000
    assert rules.service_accounts[0].principal_name == "shop/frontend"
    secret = access_secret(OWNER, text)
    assert base64.b64decode(secret["data"]["access.yaml"]).decode() == text
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_unusable_keys_are_refused_with_the_secret_named():
    with pytest.raises(AccessInputError, match=r"Secret app-a-key .* shorter than 16"):
        render_access(OWNER, spec().access, {("app-a-key", "key"): "short"})
    taken = {**ACCESS, "keys": [{**ACCESS["keys"][0], "name": "api-key"}]}
    with pytest.raises(ValidationError, match="'api-key' is reserved"):
        spec(taken)


def _pod(s: RAGEngineSpec) -> dict:
    return engine_deployment(OWNER, s)["spec"]["template"]


def test_the_engine_mounts_the_file_and_reviews_tokens_as_its_own_account():
    pod = _pod(spec())
    container = pod["spec"]["containers"][0]
    assert {"name": "access", "secret": {"secretName": "docs-access", "defaultMode": 0o440}} in pod["spec"]["volumes"]
    assert {"name": "access", "mountPath": "/etc/ragengine/access", "readOnly": True} in container["volumeMounts"]
    assert {"name": EngineSettings.env_name("access_file"), "value": "/etc/ragengine/access/access.yaml"} in container["env"]
    assert pod["spec"]["serviceAccountName"] == "docs-engine" and pod["spec"]["automountServiceAccountToken"] is True
    keys_only = _pod(spec({"keys": ACCESS["keys"]}))
    assert keys_only["spec"]["automountServiceAccountToken"] is False and "serviceAccountName" not in keys_only["spec"]
    assert _pod(spec(None))["spec"]["automountServiceAccountToken"] is False


def test_an_access_edit_does_not_roll_the_engine():
    edited = {**ACCESS, "keys": [{**ACCESS["keys"][0], "role": "write", "indexes": ["*"]}], "audience": "other"}
    a, b = _pod(spec()), _pod(spec(edited))
    assert a["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION] == b["metadata"]["annotations"][c.CONFIG_HASH_ANNOTATION]


def test_plan_adds_the_account_and_binding_only_for_serviceaccount_rules():
    with_sa = plan(OWNER, spec())
    kinds = {(o["kind"], o["metadata"]["name"]) for o in with_sa.apply}
    assert {("ServiceAccount", "docs-engine"), ("ClusterRoleBinding", "ragengine-tokenreview-team-a-docs")} <= kinds
    assert with_sa.names().index("ServiceAccount/docs-engine") < with_sa.names().index("Deployment/docs-engine")
    binding = next(o for o in with_sa.apply if o["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "system:auth-delegator"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "docs-engine", "namespace": "team-a"}]
    assert name_conflict(binding, OWNER) is None  # labelled as ours: adopted, deletable
    assert name_conflict(binding, Owner("team-b", "docs", "uid-2")) is not None
    own = plan(OWNER, spec(engine={"serviceAccountName": "mine"}))
    assert ("ServiceAccount", "docs-engine") in {(r.kind, r.name) for r in own.delete}
    assert next(o for o in own.apply if o["kind"] == "ClusterRoleBinding")["subjects"][0]["name"] == "mine"
    keys_only = plan(OWNER, spec({"keys": ACCESS["keys"]}))
    assert ("ClusterRoleBinding", "ragengine-tokenreview-team-a-docs") in {(r.kind, r.name) for r in keys_only.delete}


def test_binding_names_stay_within_the_limit():
    long = Owner("n" * 63, "x" * 253, "uid")
    assert len(tokenreview_binding(long, "a")["metadata"]["name"]) <= 253
