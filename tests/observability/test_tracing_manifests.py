"""spec.observability.tracing -> the standard OTEL_* variables for the engine and vLLM, and vLLM's
--otlp-traces-endpoint; the engine reads those variables back into its exporter (Tracing.from_env)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragengine.observability.tracing import Tracing, enabled_by
from ragengine_operator.manifests.engine import engine_deployment
from ragengine_operator.manifests.inference import inference_deployment, vllm_args
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("team-a", "docs", "uid-1")
TRACING = {"endpoint": "http://otel-collector.observability:4317", "samplingRatio": 0.25}
MODEL = {"model": "Qwen/Qwen2.5-0.5B-Instruct"}


def env_of(deployment: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def spec(**extra) -> RAGEngineSpec:
    return RAGEngineSpec.model_validate({"inference": MODEL, **extra})


def test_tracing_renders_the_otel_variables_for_the_engine_and_vllm():
    s = spec(observability={"tracing": TRACING})
    engine, vllm = env_of(engine_deployment(OWNER, s)), env_of(inference_deployment(OWNER, s))
    for env, service in ((engine, "ragengine"), (vllm, "vllm")):
        assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == TRACING["endpoint"]
        assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"
        assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio" and env["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
        assert env["OTEL_SERVICE_NAME"] == service
        assert env["OTEL_RESOURCE_ATTRIBUTES"] == "k8s.namespace.name=team-a,ragengine.name=docs"
    args = vllm_args(s)
    assert args[args.index("--otlp-traces-endpoint") + 1] == TRACING["endpoint"]
    # The engine's exporter is on with exactly these variables.
    assert enabled_by({k: v for k, v in engine.items() if v is not None})


def test_no_tracing_renders_nothing():
    s = spec()
    assert not [k for k in env_of(engine_deployment(OWNER, s)) if k.startswith("OTEL_")]
    assert not [k for k in env_of(inference_deployment(OWNER, s)) if k.startswith("OTEL_")]
    assert "--otlp-traces-endpoint" not in vllm_args(s)


@pytest.mark.parametrize("bad", [{"endpoint": "otel:4317"}, {"endpoint": "http://x:4317", "samplingRatio": 1.5},
                                 {"endpoint": "http://x:4317", "protocol": "http/json"}])
def test_bad_tracing_values_are_refused(bad):
    with pytest.raises(ValidationError):
        spec(observability={"tracing": bad})


@pytest.mark.parametrize(("env", "on"), [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, False),
])
def test_the_standard_switches(env, on):
    assert enabled_by(env) is on
    tracing = Tracing.from_env("ragengine", env=env)
    assert tracing.enabled is on
    tracing.shutdown()


def test_an_unknown_protocol_stops_the_start():
    with pytest.raises(ValueError, match="http/json"):
        Tracing.from_env("ragengine", env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318",
                                           "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})


def test_a_sync_requests_digest_ignores_its_span():
    """The digest names a sync's pod (adopted after an operator restart): each run's own traceparent must
    not change it."""
    from dataclasses import replace

    from ragengine_operator.sources.protocol import SyncRequest

    request = SyncRequest("sync", "faq", "docs", "http://docs.team-a", {"name": "faq"}, "rev-1")
    traced = replace(request, tracing=["http://c:4317", "grpc", 1.0])
    assert replace(traced, traceparent=f"00-{'a' * 32}-{'b' * 16}-01").digest() == traced.digest()
    assert traced.digest() != request.digest()  # where the spans go is part of what the worker is asked
