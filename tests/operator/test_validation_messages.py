"""The operator words a refused spec and refused access rules with the engine's ``validation_message``
(``ragengine.validation``): ``spec.<path>: <message>`` / ``access.<path>: <message>``, every error, never the
value; and importing it does not bring in the engine's web stack (FastAPI)."""

import subprocess
import sys

import pytest
from pydantic import ValidationError

from ragengine_operator.controller import spec_error
from ragengine_operator.manifests.access import AccessInputError, render_access
from ragengine_operator.manifests.labels import Owner
from ragengine_operator.spec import RAGEngineSpec

OWNER = Owner("team-a", "docs", "uid-1", engine_image="engine:1")


def refusal(raw: dict) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        RAGEngineSpec.model_validate(raw)
    return info.value


def test_a_refused_spec_names_each_field_under_spec():
    exc = refusal({"retrieval": {"screenIndexes": True, "hybrid": "maybe"}, "inference": {"url": "http://x", "model": "m"}})
    message = spec_error(exc)
    assert message.split("; ") == [f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    assert "spec.retrieval.screenIndexes: Input should be a valid list" in message
    assert "spec.inference: Value error, exactly one of inference.model or inference.url must be set" in message
    assert "maybe" not in message  # the value sent is the user's, never echoed


def test_every_error_is_told_not_the_first_five():
    sources = [{"name": f"s{i}", "index": "docs", "configMap": {"name": "c"}, "interval": -1} for i in range(7)]
    exc = refusal({"sources": sources})
    assert len(exc.errors()) > 5
    assert spec_error(exc).count("; ") == len(exc.errors()) - 1


def test_a_spec_refused_as_a_whole_says_spec():
    exc = refusal({"storage": {"vectorStore": {"type": "faiss", "connectionSecretRef": {"name": "s", "key": "k"}}}})
    assert spec_error(exc).startswith("spec.storage.vectorStore: Value error, ")
    whole = refusal([])  # type: ignore[arg-type]
    assert spec_error(whole).startswith("spec: ")


def test_access_rules_the_engine_refuses_are_worded_under_access():
    access = {"keys": [{"name": n, "keySecretRef": {"name": f"{n}-key"}, "indexes": ["*"], "role": "read"}
                       for n in ("app-a", "app-b")]}
    spec = RAGEngineSpec.model_validate({"access": access})
    same = "the-same-key-0123456789"
    with pytest.raises(AccessInputError) as info:
        render_access(OWNER, spec.access, {("app-a-key", "key"): same, ("app-b-key", "key"): same})
    assert str(info.value) == "access: Value error, two keys have the same key material"


def test_the_operator_imports_no_fastapi():
    code = ("import sys, ragengine_operator.controller, ragengine_operator.manifests.access, ragengine.validation; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
