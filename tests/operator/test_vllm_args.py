"""The vLLM command lines the operator renders, held to the options of the pinned vLLM release as its own
parser reported them (operator/ragengine_operator/vllm_flags.json, made by hack/vllm_flags.py, which also
parsed these very command lines with that parser). No vLLM is needed here."""

from __future__ import annotations

import pytest

from ragengine_operator import constants as c
from ragengine_operator import vllm_cli
from ragengine_operator.manifests.inference import vllm_args
from ragengine_operator.manifests.model_facts import TOOL_PARSERS
from ragengine_operator.spec import MANAGED_VLLM_FLAGS, TOOL_FLAGS, RAGEngineSpec

from .vllm_samples import OUTVOTED, REFUSED, SAMPLES

RELEASE = vllm_cli.release()


def rendered(spec: dict) -> list[str]:
    return vllm_args(RAGEngineSpec.model_validate(spec))


def test_the_flags_are_those_of_the_pinned_release():
    assert RELEASE.version == c.VLLM_VERSION and f":v{c.VLLM_VERSION}" in c.DEFAULT_VLLM_IMAGE
    assert len(RELEASE.options) > 300  # the whole `vllm serve` parser, not a hand-made list


@pytest.mark.parametrize("spec", SAMPLES, ids=[s["inference"]["model"] for s in SAMPLES])
def test_every_rendered_option_is_the_releases_with_its_values(spec):
    args = rendered(spec)
    i = 0
    while i < len(args):
        arg = args[i]
        assert arg.startswith("--"), f"{arg!r} would be a positional argument: {args}"
        name, _, inline = arg.partition("=")
        assert name in RELEASE.options, f"{name} is not an option of vLLM {RELEASE.version}"
        nargs = RELEASE.options[name]
        if nargs == "0":
            assert not inline, f"{name} is a switch"
            i += 1
            continue
        values = [inline] if inline else []
        i += 1
        while not inline and i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        assert len(values) == 1 or nargs in ("+", "*"), f"{name} takes {nargs} value(s), got {values}"
        assert values or nargs in ("?", "*"), f"{name} needs a value"


def flags_data() -> dict:
    import json
    from importlib import resources

    return json.loads(resources.files("ragengine_operator").joinpath("vllm_flags.json").read_text())


def test_the_command_lines_vllm_parsed_are_the_ones_rendered_now():
    """hack/vllm_flags.py parsed these with vLLM's parser: rendering something else needs a new run of it."""
    data = flags_data()
    assert [e["argv"] for e in data["checked"]] == [rendered(spec) for spec in SAMPLES], "run python hack/vllm_flags.py"
    for spec, entry in zip(SAMPLES, data["checked"], strict=True):
        inf = RAGEngineSpec.model_validate(spec).inference
        read = entry["read"]
        assert (read["model"], read["port"], read["host"]) == (inf.model, c.VLLM_PORT, "0.0.0.0")
        assert read["served_model_name"] == [inf.served_model_name or inf.model] and read["tensor_parallel_size"] == inf.gpus


@pytest.mark.parametrize(("args", "dest"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_each_spelling_vllm_reads_as_a_managed_flag_is_refused(args, dest):
    """Each passed the old check (exact names split at '=', no positional check, no --config/--uds)."""
    with pytest.raises(ValueError, match=r"inference\.args must"):
        RAGEngineSpec.model_validate({"inference": {"model": "m", "args": args}})


def test_the_operators_flags_come_last_and_outvote_unique_prefixes():
    """A unique prefix (--served-model) is the CRD's blind spot: it passes, and loses to the operator's own
    flag, which comes after it. vLLM's parser read these very command lines so (hack/vllm_flags.py)."""
    data = flags_data()
    base = flags_data()["checked"][0]["read"]
    for (args, dest), entry in zip(OUTVOTED, data["outvoted"], strict=True):
        argv = rendered({"inference": {**SAMPLES[0]["inference"], "args": args}})
        assert entry["argv"] == argv and argv[: len(args)] == args, "run python hack/vllm_flags.py"
        assert entry["read"][dest] == base[dest]


def test_managed_flags_exist_in_the_release():
    assert set(MANAGED_VLLM_FLAGS) | set(TOOL_FLAGS) | set(vllm_cli.OVERRIDING) | {"--revision"} <= set(RELEASE.options)


def test_default_tool_call_parsers_exist_in_the_release():
    assert {parser for _, parser in TOOL_PARSERS} <= set(RELEASE.tool_call_parsers)
