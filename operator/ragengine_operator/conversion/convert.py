"""RAGEngine between ragengine.io/v1alpha1 and v1beta1: pure functions over objects as JSON.

v1beta1 is the hub and the storage version; v1alpha1 is the frozen first version (v1alpha1.yaml), still
served. The conversion webhook (server.py) answers with these; nothing here does I/O.

Contract:
- ``to_v1beta1(obj)`` and ``to_v1alpha1(obj)`` return new objects and never change their argument.
- Lossless both ways, as the API server stores and serves objects (defaulted by their version's schema):
  ``to_v1alpha1(to_v1beta1(a)) == a`` for every v1alpha1 object, and ``to_v1beta1(to_v1alpha1(b)) == b``
  for every v1beta1 object, up to the defaults the API server applies. What v1alpha1 cannot hold (a field
  v1beta1 added, a source kind v1alpha1 lacks) travels in the annotation ``ragengine.io/v1beta1-fields``,
  which ``to_v1beta1`` puts back and removes; a v1beta1-only field at its default does not (defaulting
  restores it). Each kept field remembers what v1alpha1 showed at its place: a client that edits that place
  through v1alpha1 wins, and the kept field is dropped (it would undo the edit); untouched places get their
  v1beta1 value back.
- Only ``apiVersion``, ``spec`` and that annotation change; the rest of metadata and the status (the same
  in both versions) pass through.
- ``ConversionError`` for what no object the schemas admit holds: a corrupt annotation, a spec that is not
  an object. The webhook answers it as a Failure naming the reason; the API server then refuses the request
  with that message and stores nothing.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from typing import Any

import yaml

from .. import constants as c
from ..spec.schema import spec_schema

V1ALPHA1 = f"{c.GROUP}/v1alpha1"
V1BETA1 = f"{c.GROUP}/v1beta1"
KEPT_ANNOTATION = f"{c.GROUP}/v1beta1-fields"
_ABSENT = {"absent": True}  # a kept place that v1beta1 leaves empty

Path = tuple[str, ...]
# Whole objects that v1beta1 regrouped: (v1alpha1 spec path, v1beta1 spec path).
MOVES: tuple[tuple[Path, Path], ...] = (
    (("storage",), ("storage", "volume")),  # the engine's PVC: storage.volume beside the other places data lives
    (("vectorStore",), ("storage", "vectorStore")),
    (("sessions",), ("storage", "sessions")),
    (("monitoring",), ("observability", "metrics")),  # Prometheus beside tracing
)
# embedding's flat fields -> KAITO's local/remote union.
EMBEDDING: tuple[tuple[Path, Path], ...] = ((("model",), ("local", "model")), (("url",), ("remote", "url")),
             (("apiKeySecretRef",), ("remote", "apiKeySecretRef")))
SOURCE_KINDS_V1ALPHA1 = ("configMap", "git", "http")


class ConversionError(ValueError):
    """The object cannot be converted (the webhook's Failure message)."""


def convert(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    """``obj`` (either version) as ``api_version``."""
    source = obj.get("apiVersion")
    if source not in (V1ALPHA1, V1BETA1) or api_version not in (V1ALPHA1, V1BETA1):
        raise ConversionError(f"cannot convert {source!r} to {api_version!r}: this operator serves {V1ALPHA1} and {V1BETA1}")
    if source == api_version:
        return copy.deepcopy(obj)
    return to_v1beta1(obj) if api_version == V1BETA1 else to_v1alpha1(obj)


# -- v1alpha1 -> v1beta1 ------------------------------------------------------------------------------------
def to_v1beta1(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["apiVersion"] = V1BETA1
    annotations = out.get("metadata", {}).get("annotations") or {}
    kept = _read_kept(annotations.pop(KEPT_ANNOTATION, None))
    _drop_empty_annotations(out)
    if "spec" not in out:
        return out
    spec = _spec(out)
    out["spec"] = _spec_up(spec)
    for entry in kept:
        path = tuple(entry["path"])
        # Put back only where v1alpha1 still shows what it showed when the field was kept.
        if _get(out["spec"], path, _ABSENT) == entry["seen"]:
            if entry["value"] == _ABSENT:
                _pop(out["spec"], path)
            else:
                _set(out["spec"], path, entry["value"])
    return out


def _spec_up(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    moved = [(new, _pop(spec, old)) for old, new in MOVES]
    for new, value in moved:
        if value is not _MISSING:
            _set(spec, new, value)
    if isinstance(spec.get("embedding"), dict):
        embedding = spec["embedding"]
        fields = [(new, _pop(embedding, old)) for old, new in EMBEDDING]
        for new, value in fields:
            if value is not _MISSING:
                _set(embedding, new, value)
    return spec


# -- v1beta1 -> v1alpha1 ------------------------------------------------------------------------------------
def to_v1alpha1(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["apiVersion"] = V1ALPHA1
    out.get("metadata", {}).get("annotations", {}).pop(KEPT_ANNOTATION, None)
    _drop_empty_annotations(out)
    if "spec" not in out:
        return out
    spec = _spec(out)
    down = _spec_down(spec)
    back = _spec_up(down)
    kept = [{"path": list(path), "value": value, "seen": _get(back, path, _ABSENT)}
            for path, value in _differences(spec, back, ()) if not _comes_back(path, value, back)]
    out["spec"] = down
    if kept:
        metadata = out.setdefault("metadata", {})
        metadata.setdefault("annotations", {})[KEPT_ANNOTATION] = json.dumps(
            {"version": 1, "fields": kept}, sort_keys=True, separators=(",", ":"))
    return out


def _spec_down(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    if isinstance(spec.get("embedding"), dict):
        embedding = spec["embedding"]
        fields = [(old, _pop(embedding, new)) for old, new in EMBEDDING]
        for part in ("local", "remote"):  # emptied by the moves: v1alpha1 has no such objects
            if embedding.get(part) == {}:
                del embedding[part]
        for old, value in fields:
            if value is not _MISSING:
                _set(embedding, old, value)
    moved = [(old, _pop(spec, new)) for old, new in MOVES]
    # v1beta1's storage group is gone once its parts moved out (v1alpha1's storage is the volume alone);
    # observability stays: v1alpha1 has it too (tracing), and defaults it to {}.
    if spec.get("storage") == {}:
        del spec["storage"]
    for old, value in moved:
        if value is not _MISSING:
            _set(spec, old, value)
    pruned = _prune(spec, _v1alpha1_spec_schema())
    if isinstance(spec.get("sources"), list):  # a source of a kind v1alpha1 lacks is left out (and kept whole)
        pruned["sources"] = [p for s, p in zip(spec["sources"], pruned["sources"], strict=True)
                             if not (isinstance(s, dict) and s != p and not any(k in p for k in SOURCE_KINDS_V1ALPHA1))]
    return pruned


def _prune(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` without what the structural schema does not know (as the API server would prune it)."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return value
        props = schema.get("properties")
        if props is None:
            extra = schema.get("additionalProperties")
            return {k: _prune(v, extra) for k, v in value.items()} if isinstance(extra, dict) else value
        return {k: _prune(v, props[k]) for k, v in value.items() if k in props}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(v, schema["items"]) for v in value]
    return value


@cache
def _v1alpha1_spec_schema() -> dict[str, Any]:
    version = yaml.safe_load(resources.files(__package__).joinpath("v1alpha1.yaml").read_text())
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


# -- the kept fields ----------------------------------------------------------------------------------------
def _differences(want: Any, have: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """The places where ``have`` differs from ``want``: (path, want's value there or _ABSENT)."""
    if isinstance(want, dict) and isinstance(have, dict):
        found = []
        for key in sorted(set(want) | set(have)):
            if key not in want:
                found.append(((*path, key), _ABSENT))
            elif key not in have:
                found.append(((*path, key), want[key]))
            else:
                found += _differences(want[key], have[key], (*path, key))
        return found
    return [] if want == have else [(path, want)]


def _comes_back(path: Path, value: Any, back: dict[str, Any]) -> bool:
    """A v1beta1 field at its default where v1alpha1 shows nothing: the API server's defaulting puts it back
    on every read at v1beta1, so keeping it would only put the annotation on every v1alpha1 object."""
    if _get(back, path, _ABSENT) != _ABSENT:
        return False
    node: Any = spec_schema()
    for part in path:
        node = (node.get("properties") or {}).get(part) if isinstance(node, dict) else None
        if node is None:
            return False
    return "default" in node and node["default"] == value


def _read_kept(raw: str | None) -> list[dict[str, Any]]:
    if raw is None:
        return []
    try:
        kept = json.loads(raw)
        fields = kept["fields"]
        if kept.get("version") != 1 or not isinstance(fields, list):
            raise TypeError("unknown version")
        for entry in fields:
            if not (isinstance(entry["path"], list) and entry["path"] and all(isinstance(p, str) for p in entry["path"])
                    and "value" in entry and "seen" in entry):
                raise TypeError("bad entry")
    except (ValueError, TypeError, KeyError) as exc:
        raise ConversionError(
            f"annotation {KEPT_ANNOTATION} is not what this operator wrote ({exc}): it holds the v1beta1 fields of "
            "this object that v1alpha1 cannot show; remove it, or write the object as v1beta1") from None
    return fields


def _drop_empty_annotations(obj: dict[str, Any]) -> None:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and metadata.get("annotations") == {}:
        del metadata["annotations"]


# -- paths ----------------------------------------------------------------------------------------------------
_MISSING = object()


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if not isinstance(spec, dict):
        raise ConversionError(f"spec must be an object, not {type(spec).__name__}")
    return spec


def _get(node: Any, path: tuple[str, ...], default: Any) -> Any:
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _set(node: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


def _pop(node: Any, path: tuple[str, ...]) -> Any:
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    if not isinstance(node, dict) or path[-1] not in node:
        return _MISSING
    return node.pop(path[-1])
