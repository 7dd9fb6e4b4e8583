"""Hypothesis strategies for objects a Kubernetes structural schema admits (the CRD's openAPIV3Schema).

hypothesis-jsonschema would do this, but it no longer runs on current Hypothesis (it calls removed
internals); a structural schema is a small subset of JSON Schema, so this walks it directly. Generated
values respect types, enums, patterns, lengths, bounds and item counts (kept small); CEL rules are not
JSON Schema and are not applied. Unknown fields never appear: the API server would prune them.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import strategies as st

TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=8)


def _string(node: dict[str, Any]) -> st.SearchStrategy[str]:
    lo, hi = node.get("minLength", 0), min(node.get("maxLength", 24), 24)
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if "pattern" in node:
        pattern = node["pattern"]
        # schema patterns match anywhere unless anchored (ECMA semantics): generate whole matches of the pattern
        strategy = st.from_regex(re.compile(pattern), fullmatch=pattern.startswith("^") and pattern.endswith("$"))
        return strategy.filter(lambda s: lo <= len(s) <= max(hi, lo) and "\n" not in s)
    return st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=lo, max_size=max(hi, lo))


def from_structural(node: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return st.one_of(st.integers(1, 4096), st.from_regex(r"[1-9][0-9]{0,2}(Mi|Gi)", fullmatch=True))
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        props = node.get("properties")
        if props is None:
            if node.get("x-kubernetes-preserve-unknown-fields") or not isinstance(node.get("additionalProperties"), dict):
                return st.dictionaries(st.sampled_from(["a", "b"]), TEXT, max_size=1)
            return st.dictionaries(_string({"maxLength": 8, "minLength": 1}),
                                   from_structural(node["additionalProperties"], depth + 1),
                                   max_size=min(node.get("maxProperties", 2), 2))
        required = set(node.get("required", ()))
        if depth > 8:  # deep optional objects add nothing the shallower ones do not test
            return st.fixed_dictionaries({k: from_structural(v, depth + 1) for k, v in props.items() if k in required})
        return st.fixed_dictionaries(
            {k: from_structural(v, depth + 1) for k, v in props.items() if k in required},
            optional={k: from_structural(v, depth + 1) for k, v in props.items() if k not in required})
    if kind == "array":
        lo = node.get("minItems", 0)
        items = st.lists(from_structural(node.get("items", {}), depth + 1), min_size=lo,
                         max_size=max(lo, min(node.get("maxItems", 2), 2)))
        keys = node.get("x-kubernetes-list-map-keys")
        if keys:  # a map list: unique keys, as the API server requires
            return items.map(lambda xs: list({tuple(x.get(k) for k in keys): x for x in xs}.values()))
        return items
    if kind == "string":
        return _string(node)
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(node.get("minimum", -1000), node.get("maximum", 1000))
    if kind == "number":
        return st.floats(node.get("minimum", -1000.0), node.get("maximum", 1000.0), allow_nan=False,
                         exclude_min=bool(node.get("exclusiveMinimum")), exclude_max=bool(node.get("exclusiveMaximum")))
    return TEXT
