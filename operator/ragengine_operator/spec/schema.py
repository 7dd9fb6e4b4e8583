"""The spec models as a Kubernetes *structural* schema: what the CRD's openAPIV3Schema is made of.

The pydantic JSON schema is rewritten: $refs inlined, no anyOf-with-null, no titles, no additionalProperties
next to properties, and an object's default of {} spelt out with its fields' defaults (the API server
validates a default as written). hack/gen_crds.py builds the CRD from it; the conversion (conversion/
convert.py) reads v1beta1's defaults from it, as the API server applies them.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from pydantic import BaseModel

DROP = {"title", "examples", "$defs"}


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one pydantic JSON-schema node into an OpenAPI v3 structural-schema node."""
    if "$ref" in schema:
        target = defs[schema["$ref"].split("/")[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if len(options) == 1:  # Optional[X]: absence is the null; keep X
            return structural({**options[0], **rest}, defs)
        if schema.get("x-kubernetes-int-or-string"):
            return {k: v for k, v in rest.items() if k not in DROP}
        raise ValueError(f"unsupported union in schema: {schema}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in DROP or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural(value, defs)
        else:
            out[key] = value
    if "properties" in out:
        out["type"] = "object"
        out.pop("additionalProperties", None)  # unknown fields are pruned/rejected by the API server
        if out.get("default") == {}:
            # The API server validates a default as written (inner defaults not applied), so CEL
            # rules on the object would see no fields: spell the inner defaults out.
            out["default"] = {k: v["default"] for k, v in out["properties"].items() if "default" in v}
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


@cache
def spec_schema() -> dict[str, Any]:
    """The v1beta1 spec's structural schema (the stored version's, defaults included)."""
    from .ragengine import RAGEngineSpec

    return model_schema(RAGEngineSpec)
