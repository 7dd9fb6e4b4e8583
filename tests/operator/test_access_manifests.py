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
from ragengine_operator.kube.bindings import why_delete
from ragengine_operator.manifests.access import (
    AccessInputError,
    access_secret,
    audience_refusal,
    binding_name,
    default_audience,
    legacy_binding_name,
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


def _refs(p) -> set[tuple[str, str]]:
    return {(r.kind, r.name) for r in p.delete}


def test_plan_adds_the_account_and_binding_only_for_serviceaccount_rules():
    with_sa = plan(OWNER, spec())
    kinds = {(o["kind"], o["metadata"]["name"]) for o in with_sa.apply}
    assert {("ServiceAccount", "docs-engine"), ("ClusterRoleBinding", binding_name(OWNER))} <= kinds
    assert with_sa.names().index("ServiceAccount/docs-engine") < with_sa.names().index("Deployment/docs-engine")
    binding = next(o for o in with_sa.apply if o["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "system:auth-delegator"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "docs-engine", "namespace": "team-a"}]
    assert name_conflict(binding, OWNER) is None  # labelled as ours: adopted, deletable
    assert name_conflict(binding, Owner("team-b", "docs", "uid-2")) is not None
    keys_only = plan(OWNER, spec({"keys": ACCESS["keys"]}))
    assert ("ClusterRoleBinding", binding_name(OWNER)) in _refs(keys_only)


def test_the_engine_reviews_tokens_as_the_operators_account_never_one_the_tenant_names():
    """Issue 41, finding 6: spec.engine.serviceAccountName bound system:auth-delegator to any account of the
    namespace the tenant picked (the default one, say, which every other pod runs as)."""
    own = plan(OWNER, spec(engine={"serviceAccountName": "default"}))
    binding = next(o for o in own.apply if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "docs-engine", "namespace": "team-a"}]
    assert ("ServiceAccount", "docs-engine") in {(o["kind"], o["metadata"]["name"]) for o in own.apply}
    assert _pod(spec(engine={"serviceAccountName": "default"}))["spec"]["serviceAccountName"] == "docs-engine"
    # without ServiceAccount rules the tenant's account is used as before (no token mounted, no binding)
    keys_only = _pod(spec({"keys": ACCESS["keys"]}, engine={"serviceAccountName": "default"}))["spec"]
    assert keys_only["serviceAccountName"] == "default" and keys_only["automountServiceAccountToken"] is False


def test_binding_names_are_hashed_so_namespaces_and_names_cannot_collide():
    """Issue 41, finding 6: ragengine-tokenreview-<namespace>-<name> is the same for team/a-kb and team-a/kb,
    so one tenant could hold the binding another's engine needs."""
    a, b = Owner("team", "a-kb", "uid-a"), Owner("team-a", "kb", "uid-b")
    assert legacy_binding_name(a) == legacy_binding_name(b) == "ragengine-tokenreview-team-a-kb"
    assert binding_name(a) != binding_name(b)
    assert tokenreview_binding(a, "a-kb-engine")["metadata"]["name"] == binding_name(a)
    long = Owner("n" * 63, "x" * 253, "uid")
    assert len(tokenreview_binding(long, "a")["metadata"]["name"]) <= 253


def test_the_sweep_deletes_an_earlier_releases_binding_once_replaced_or_unneeded():
    old = tokenreview_binding(OWNER, "default")  # as an earlier release made it: the tenant's account
    old["metadata"]["name"] = legacy_binding_name(OWNER)
    with_sa, without = {"spec": {"access": ACCESS}}, {"spec": {"access": {"keys": ACCESS["keys"]}}}
    new = tokenreview_binding(OWNER, "docs-engine")
    both = {old["metadata"]["name"], new["metadata"]["name"]}
    assert "now ragengine-tokenreview-" in why_delete(old, with_sa, both)  # replaced: it goes
    assert why_delete(old, with_sa, {old["metadata"]["name"]}) is None  # not replaced yet: kept, no gap
    assert "no ServiceAccount rules" in why_delete(old, without, {old["metadata"]["name"]})
    assert "is gone" in why_delete(old, None, both)
    assert why_delete(new, with_sa, both) is None and "is gone" in why_delete(new, None, both)


@pytest.mark.parametrize("audience", [
    "https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local", "kubernetes.default.svc",
    "HTTPS://Kubernetes.Default.Svc/", "https://kubernetes.default.svc:443", "https://kubernetes.default",
    " https://kubernetes.default.svc.cluster.local. "])
def test_the_api_servers_own_audience_is_refused(audience):
    """Issue 41, finding 6: the engine would collect callers' tokens that the API server accepts."""
    with pytest.raises(ValidationError, match="must not be the Kubernetes API server's own audience"):
        spec({**ACCESS, "audience": audience})


def test_the_clusters_own_audiences_are_refused_by_the_controller():
    issuer = "https://oidc.example/id/1234"
    assert audience_refusal(OWNER, spec({**ACCESS, "audience": issuer}).access, frozenset({issuer}))
    assert audience_refusal(OWNER, spec(ACCESS).access, frozenset({issuer})) is None  # the default
    assert audience_refusal(OWNER, spec({"keys": ACCESS["keys"], "audience": issuer}).access,
                            frozenset({issuer})) is None  # no ServiceAccount rules: no tokens collected
    for fine in ("ragengine.io/team-a/docs", "https://kubernetes.default.svc.evil.example/x", "kubernetes"):
        assert spec({**ACCESS, "audience": fine}).access.audience == fine
