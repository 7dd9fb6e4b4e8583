"""The operator's policy on what a RAGEngine may ask for (issue 22, finding 9): pure refusals."""

import pytest

from ragengine_operator.reconcile.policy import Policy, refusals
from ragengine_operator.settings import OperatorSettings
from ragengine_operator.spec import RAGEngineSpec

RISKY = {
    "engine": {"image": "attacker/img:1", "serviceAccountName": "deployer", "priorityClassName": "system-node-critical",
               "runtimeClassName": "runc-unsafe",
               "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "prod-db", "key": "password"}}},
                       {"name": "PLAIN", "value": "1"}]},
    "inference": {"model": "m", "image": "vllm/vllm-openai:v0.11.0"},
}


def test_the_default_policy_allows_everything_the_api_server_does():
    assert refusals(RAGEngineSpec.model_validate(RISKY), Policy()) == []


def test_a_locked_down_policy_names_every_refused_field():
    policy = Policy(allowed_images=("ghcr.io/ragengine/*", "vllm/vllm-openai:*"), allow_service_account_name=False,
                    allow_priority_class_name=False, allow_runtime_class_name=False, allow_env_value_from=False)
    found = refusals(RAGEngineSpec.model_validate(RISKY), policy)
    assert len(found) == 5, found
    text = "; ".join(found)
    for words in ("spec.engine.serviceAccountName", "allowServiceAccountName: false",
                  "spec.engine.priorityClassName", "spec.engine.runtimeClassName",
                  "spec.engine.env[].valueFrom (P)", "allowEnvValueFrom: false",
                  "spec.engine.image 'attacker/img:1'", "allowedImages: ghcr.io/ragengine/*, vllm/vllm-openai:*"):
        assert words in text, words
    assert "PLAIN" not in text and "spec.inference" not in text  # a plain value and an allowed image pass


@pytest.mark.parametrize("image, allowed", [
    ("ghcr.io/ragengine/engine-gpu:0.2.0", True), ("ghcr.io/ragengine/engine@sha256:ab", True),
    ("ghcr.io/ragengine-evil/engine:1", False), ("docker.io/ghcr.io/ragengine/x", False),
])
def test_image_globs(image, allowed):
    spec = RAGEngineSpec.model_validate({"engine": {"image": image}})
    assert (refusals(spec, Policy(allowed_images=("ghcr.io/ragengine/*",))) == []) is allowed


def test_the_operators_own_defaults_are_never_checked():
    spec = RAGEngineSpec.model_validate({"inference": {"model": "m"}})  # no image named: the operator's
    assert refusals(spec, Policy(allowed_images=("nothing/*",))) == []


def test_policy_from_the_environment(monkeypatch):
    monkeypatch.setenv("RAGENGINE_OPERATOR_ALLOWED_IMAGES", '["ghcr.io/acme/*"]')
    monkeypatch.setenv("RAGENGINE_OPERATOR_ALLOW_ENV_VALUE_FROM", "false")
    policy = Policy.from_settings(OperatorSettings())
    assert policy.allowed_images == ("ghcr.io/acme/*",) and policy.allow_env_value_from is False
    assert policy.allow_service_account_name is True
