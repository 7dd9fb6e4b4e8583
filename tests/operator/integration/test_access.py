"""spec.access on the real control plane, with the operator under the chart's own RBAC: the access Secret
is rendered (keys as SHA-256 only) and mounted, the engine's ServiceAccount and its TokenReview binding
exist; a CR edit updates the Secret without touching the Deployment's pod template; a ServiceAccount rule
for a namespace that does not exist leaves the Secret as it was and says so in Degraded; removing
spec.access removes the account and binding; the binding of a deleted RAGEngine is swept; two RAGEngines
whose old binding names collided each get their own, and an earlier release's binding goes."""

from __future__ import annotations

import base64
import contextlib
import hashlib

import yaml
from kubernetes.client.rest import ApiException

from ragengine.settings import EngineSettings
from ragengine_operator import constants as c
from ragengine_operator.manifests.access import binding_name, legacy_binding_name, tokenreview_binding
from ragengine_operator.manifests.labels import Owner

from .conftest import RESTRICTED
from .kube import wait_for
from .test_lifecycle import env_of, template_hash

KEY = "app-a-key-0123456789abcdef"


def _access_file(kube, ns: str, n: str) -> dict | None:
    try:
        secret = kube.core.read_namespaced_secret(f"{n}-access", ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return yaml.safe_load(base64.b64decode(secret.data["access.yaml"]))


def _binding(kube, ns: str, n: str, name: str | None = None) -> dict | None:
    from kubernetes import client as k8s

    try:
        return kube.api.sanitize_for_serialization(k8s.RbacAuthorizationV1Api(kube.api).read_cluster_role_binding(
            name or binding_name(Owner(ns, n, ""))))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _account_exists(kube, ns: str, name: str) -> bool:
    try:
        kube.core.read_namespaced_service_account(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _degraded(kube, ns: str, n: str, fragment: str) -> bool:
    cond = kube.condition(ns, n, c.DEGRADED)
    return bool(cond and cond["status"] == "True" and fragment in cond["message"])


def test_access_secret_rendered_mounted_and_updated_without_a_roll(kube, namespace, operator_identity):
    ns, n = namespace, "acl"
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "app-a"}, "stringData": {"key": KEY}})
    access = {"keys": [{"name": "app-a", "keySecretRef": {"name": "app-a"}, "indexes": ["team-a-*"], "role": "read",
                        "groups": ["ops"]}],
              "serviceAccounts": [{"namespace": ns, "name": "frontend", "indexes": ["catalog"], "role": "read"}]}
    kube.create_rag(ns, n, {"storage": {"volume": {"size": "1Gi"}}, "access": access})

    rendered = wait_for(lambda: _access_file(kube, ns, n), 30, "the access Secret")
    assert rendered["keys"][0]["keySha256"] == hashlib.sha256(KEY.encode()).hexdigest()
    assert KEY not in yaml.safe_dump(rendered)
    assert rendered["serviceAccounts"] == [{"namespace": ns, "name": "frontend", "indexes": ["catalog"], "role": "read"}]
    assert rendered["audience"] == f"ragengine.io/{ns}/{n}"
    engine = wait_for(lambda: kube.deployment(ns, f"{n}-engine"), 30, "the engine Deployment")
    pod = engine["spec"]["template"]["spec"]
    assert env_of(engine)[EngineSettings.env_name("access_file")] == "/etc/ragengine/access/access.yaml"
    assert {"name": "access", "secret": {"secretName": f"{n}-access", "defaultMode": 0o440}} in pod["volumes"]
    assert pod["serviceAccountName"] == f"{n}-engine" and pod["automountServiceAccountToken"] is True
    kube.core.read_namespaced_service_account(f"{n}-engine", ns)
    binding = wait_for(lambda: _binding(kube, ns, n), 30, "the TokenReview binding")
    assert binding["roleRef"]["name"] == "system:auth-delegator"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{n}-engine", "namespace": ns}]
    before = template_hash(engine)
    generation = engine["metadata"]["generation"]

    # An edit of the rules: the Secret follows, the pod template does not move (no roll).
    kube.patch_rag(ns, n, {"spec": {"access": {**access, "keys": [{**access["keys"][0], "role": "write"}]}}})
    wait_for(lambda: (_access_file(kube, ns, n) or {}).get("keys", [{}])[0].get("role") == "write", 30,
             "the Secret to carry the edit")
    engine = kube.deployment(ns, f"{n}-engine")
    assert template_hash(engine) == before and engine["metadata"]["generation"] == generation

    # A rule for a namespace that does not exist: refused, the previous rules stay in the Secret.
    missing = {**access, "serviceAccounts": [*access["serviceAccounts"],
                                             {"namespace": f"{ns}-nope", "name": "x", "indexes": ["*"], "role": "read"}]}
    kube.patch_rag(ns, n, {"spec": {"access": missing}})
    wait_for(lambda: _degraded(kube, ns, n, f"namespace '{ns}-nope' does not exist"), 30, "Degraded naming the namespace")
    assert len(_access_file(kube, ns, n)["serviceAccounts"]) == 1
    kube.patch_rag(ns, n, {"spec": {"access": access}})
    wait_for(lambda: not _degraded(kube, ns, n, "does not exist"), 30, "Degraded to clear")

    # A key Secret that goes away: refused the same way (the previous file still has the key's hash).
    kube.core.delete_namespaced_secret("app-a", ns)
    kube.patch_rag(ns, n, {"spec": {"access": {**access, "keys": [{**access["keys"][0], "role": "admin"}]}}})
    wait_for(lambda: _degraded(kube, ns, n, "Secret app-a does not exist"), 30, "Degraded naming the Secret")
    assert _access_file(kube, ns, n)["keys"][0]["role"] == "read"

    # No more spec.access: the account and binding go, the engine stops mounting the file (the Secret stays,
    # unused, until the RAGEngine goes: the operator may not delete Secrets).
    kube.patch_rag(ns, n, {"spec": {"access": None}})
    wait_for(lambda: _binding(kube, ns, n) is None, 30, "the TokenReview binding deleted")
    engine = wait_for(lambda: (d := kube.deployment(ns, f"{n}-engine")) and EngineSettings.env_name("access_file")
                      not in env_of(d) and d, 30, "the engine without the access file")
    assert engine["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    wait_for(lambda: not _account_exists(kube, ns, f"{n}-engine"), 30, "the engine's ServiceAccount deleted")


def test_the_binding_of_a_deleted_ragengine_is_swept(kube, namespace, operator_identity):
    from kubernetes import config as k8s_config

    from ragengine_operator.controller import Controller
    from ragengine_operator.settings import OperatorSettings

    ns, n = namespace, "gone"
    access = {"serviceAccounts": [{"namespace": ns, "name": "frontend", "indexes": ["*"], "role": "read"}]}
    kube.create_rag(ns, n, {"storage": {"volume": {"size": "1Gi"}}, "access": access})
    wait_for(lambda: _binding(kube, ns, n), 30, "the TokenReview binding")
    kube.delete_rag(ns, n)
    wait_for(lambda: not kube.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL)["items"], 30,
             "the RAGEngine gone")
    assert _binding(kube, ns, n) is not None  # the garbage collector cannot take a cluster-scoped child
    # The sweep, as the operator runs it (under the chart's ClusterRole).
    controller = Controller(k8s_config.new_client_from_config(config_file=str(operator_identity)), OperatorSettings())
    assert controller.sweep_bindings() >= 1
    wait_for(lambda: _binding(kube, ns, n) is None, 30, "the binding gone (a foreground delete: the GC finishes it)")


def test_colliding_binding_names_are_apart_and_an_earlier_releases_binding_goes(kube, namespace, operator_identity):
    """Issue 41, finding 6: ragengine-tokenreview-<namespace>-<name> was the same for team/a-kb and team-a/kb, so
    whichever came second was Degraded (NameConflict) and its engine could not review tokens. Both now get a
    binding of their own; the old-named binding an earlier release made (here for team-a/kb, bound to the
    tenant's own account) is deleted by its RAGEngine, and never by the other one."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    from ragengine_operator.controller import Controller
    from ragengine_operator.settings import OperatorSettings

    team, team_a = namespace, f"{namespace}-a"  # "team"/"a-kb" and "team-a"/"kb"
    kube.core.create_namespace({"metadata": {"name": team_a, "labels": RESTRICTED}})
    rbac = k8s.RbacAuthorizationV1Api(kube.api)
    legacy = legacy_binding_name(Owner(team, "a-kb", ""))
    try:
        kube.create_rag(team_a, "kb", {"storage": {"volume": {"size": "1Gi"}}, "access": {
            "serviceAccounts": [{"namespace": team_a, "name": "frontend", "indexes": ["*"], "role": "read"}]}})
        uid = kube.get_rag(team_a, "kb")["metadata"]["uid"]
        old = tokenreview_binding(Owner(team_a, "kb", uid), "default")  # as an earlier release made it
        old["metadata"]["name"] = legacy
        assert legacy == legacy_binding_name(Owner(team_a, "kb", uid))
        rbac.create_cluster_role_binding(old)
        kube.create_rag(team, "a-kb", {"storage": {"volume": {"size": "1Gi"}}, "access": {
            "serviceAccounts": [{"namespace": team, "name": "frontend", "indexes": ["*"], "role": "read"}]}})

        mine = wait_for(lambda: _binding(kube, team, "a-kb"), 30, "team/a-kb's binding")
        theirs = wait_for(lambda: _binding(kube, team_a, "kb"), 30, "team-a/kb's binding")
        assert mine["subjects"] == [{"kind": "ServiceAccount", "name": "a-kb-engine", "namespace": team}]
        assert theirs["subjects"] == [{"kind": "ServiceAccount", "name": "kb-engine", "namespace": team_a}]
        assert _binding(kube, team, "a-kb", legacy)["subjects"][0]["name"] == "default"  # still there
        # The sweep, as the operator runs it once a minute (under the chart's ClusterRole): the old binding is
        # team-a/kb's (its labels), replaced now, so it goes; team/a-kb never takes it for its own.
        controller = Controller(k8s_config.new_client_from_config(config_file=str(operator_identity)), OperatorSettings())
        assert controller.sweep_bindings() >= 1
        wait_for(lambda: _binding(kube, team, "a-kb", legacy) is None, 30, "the earlier release's binding gone")
        for ns, n in ((team, "a-kb"), (team_a, "kb")):
            wait_for(lambda ns=ns, n=n: (kube.condition(ns, n, c.DEGRADED) or {}).get("status") == "False", 30,
                     f"{ns}/{n} not Degraded")
    finally:
        kube.delete_all_ragengines(team_a)
        kube.core.delete_namespace(team_a)
        for name in (legacy, binding_name(Owner(team_a, "kb", ""))):
            with contextlib.suppress(ApiException):
                rbac.delete_cluster_role_binding(name)


def test_the_operator_reads_the_api_servers_own_audiences(operator_identity):
    """What an access.audience may not be in this cluster (issue 41, finding 6): the operator's own token's
    audiences and the issuer of OIDC discovery, read under the chart's RBAC (hack/cluster.sh sets
    --service-account-issuer=https://kubernetes.default.svc.cluster.local)."""
    from kubernetes import config as k8s_config
    from kubernetes.dynamic import DynamicClient

    from ragengine_operator.kube.client import api_audiences

    found, complete = api_audiences(DynamicClient(k8s_config.new_client_from_config(config_file=str(operator_identity))))
    assert complete and found == {"https://kubernetes.default.svc.cluster.local"}
