"""Issue 26 on the real control plane: the GuardrailsPolicy condition follows the policy ConfigMap. An edit
that breaks the YAML is reported (False, and Degraded for GitOps tools) at the next resync, with no change
to the RAGEngine, and a fix clears it; without configMapRef the chart's default is loaded."""

from __future__ import annotations

from ragengine_operator import constants as c

from .kube import wait_for

VALID = "action: block\nblockMessage: Blocked.\nscanners:\n  - type: secrets\n  - type: sensitive\n    action: redact\n"
BROKEN = "scanners: [ - type: regex\n"
RESYNC_WAIT = 60  # the tests' operator resyncs every 5 s; a loaded machine gets room


def _configmap(kube, ns: str, name: str, text: str) -> None:
    kube.kubectl("apply", "-n", ns, "-f", "-", input=(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n  guardrails.yaml: |\n"
        + "".join(f"    {line}\n" for line in text.splitlines())))


def _policy(kube, ns: str, n: str, reason: str) -> dict:
    def seen():
        cond = kube.condition(ns, n, c.GUARDRAILS_POLICY)
        return cond if cond is not None and cond["reason"] == reason else None
    return wait_for(seen, RESYNC_WAIT, f"{ns}/{n} GuardrailsPolicy reason {reason}")


def test_a_configmap_edit_that_breaks_the_policy_is_reported_and_a_fix_clears_it(kube, namespace, llm_url):
    ns, n = namespace, "guarded"
    _configmap(kube, ns, "team-policy", VALID)
    kube.create_rag(ns, n, {"inference": {"url": llm_url}, "storage": {"volume": {"size": "1Gi"}},
                            "guardrails": {"enabled": True, "configMapRef": {"name": "team-policy"}}})
    kube.wait_ready(ns, n)
    cond = _policy(kube, ns, n, "PolicyLoaded")
    assert cond["status"] == "True"
    assert cond["message"] == ("ConfigMap team-policy key guardrails.yaml: 2 scanners (secrets, sensitive), "
                               "default action block")
    generation = kube.get_rag(ns, n)["metadata"]["generation"]

    _configmap(kube, ns, "team-policy", BROKEN)
    cond = _policy(kube, ns, n, "PolicyInvalid")
    assert cond["status"] == "False" and "not valid YAML" in cond["message"]
    degraded = kube.condition(ns, n, c.DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "GuardrailsPolicyInvalid")
    assert kube.condition(ns, n, c.READY)["status"] == "True"  # the engine serves on its last good policy
    def warned() -> bool:  # kubectl describe shows it: one Warning Event for the distinct failure
        out = kube.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={n},type=Warning",
                           "-o", "jsonpath={.items[*].reason}").stdout.split()
        return "GuardrailsPolicyInvalid" in out
    wait_for(warned, RESYNC_WAIT, "a Warning Event GuardrailsPolicyInvalid")

    _configmap(kube, ns, "team-policy", VALID)
    _policy(kube, ns, n, "PolicyLoaded")
    wait_for(lambda: kube.condition(ns, n, c.DEGRADED)["status"] == "False", RESYNC_WAIT, "Degraded back to False")
    assert kube.get_rag(ns, n)["metadata"]["generation"] == generation  # nobody touched the RAGEngine


def test_without_a_configmap_ref_the_default_policy_is_created_and_loaded(kube, namespace, llm_url):
    ns, n = namespace, "defaults"
    kube.create_rag(ns, n, {"inference": {"url": llm_url}, "storage": {"volume": {"size": "1Gi"}},
                            "guardrails": {"enabled": True}})
    kube.wait_ready(ns, n)
    cond = _policy(kube, ns, n, "PolicyLoaded")
    assert cond["message"].startswith(f"ConfigMap {n}-guardrails key guardrails.yaml: ")
    owned = kube.core.read_namespaced_config_map(f"{n}-guardrails", ns)
    assert owned.metadata.owner_references[0].name == n and "scanners" in owned.data["guardrails.yaml"]
