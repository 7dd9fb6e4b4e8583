"""spec.py's own validators agree with the CRD's CEL rules (same cases as the API-server test)."""

import pytest
from pydantic import ValidationError

from ragengine_operator.spec import RAGEngineSpec

from .cases import GOOD_MODEL, GOOD_URL, INVALID

# Where the CRD's one CEL rule words a case differently from pydantic: it words both directions of the
# secret rule together, and lists every managed vLLM flag where pydantic names the one it found.
PYDANTIC_WORDING = {"faiss-with-secret": "spec.storage.vectorStore: Value error, "
                                         "storage.vectorStore.connectionSecretRef applies to "
                                         "postgres and milvus only",
                    "vllm-underscore-flag": "spec.inference: Value error, inference.args must not set --max-model-len"}


def k8s_errors(exc: ValidationError) -> str:
    """Each error as ``spec.<path>: <message>``, the path spelled as the API server spells it (list
    items as ``[0]``), so one expected text serves both the CRD test and this one."""
    def path(loc) -> str:
        return "spec" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)

    return "; ".join(f"{path(err['loc'])}: {err['msg']}" for err in exc.errors())


@pytest.mark.parametrize(("case", "spec", "message", "pydantic_too"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_specs_rejected_by_model(case, spec, message, pydantic_too):
    """Rejected for the reason the case names (the field or the rule's own words), not for any reason."""
    assert pydantic_too, "every CEL rule has a pydantic twin"
    with pytest.raises(ValidationError) as info:
        RAGEngineSpec.model_validate(spec)
    assert PYDANTIC_WORDING.get(case, message) in k8s_errors(info.value)


def test_defaults():
    spec = RAGEngineSpec.model_validate(GOOD_MODEL)
    assert spec.runs_vllm and spec.inference.gpus == 1 and spec.inference.replicas == 1
    assert spec.retrieval.context_token_ratio == 0.5 and spec.retrieval.hybrid is True
    assert spec.storage.volume.size == "20Gi" and spec.inference.model_cache.size == "100Gi"
    assert not RAGEngineSpec.model_validate(GOOD_URL).runs_vllm
    assert RAGEngineSpec.model_validate({}).inference is None  # retrieval-only


def test_camel_case_round_trip():
    spec = RAGEngineSpec.model_validate({"retrieval": {"contextTokenRatio": 0.3}, "inference": {"url": "http://x/v1"}})
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["retrieval"]["contextTokenRatio"] == 0.3
    assert RAGEngineSpec.model_validate(dumped) == spec
