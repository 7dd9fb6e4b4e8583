"""The RAGEngine schema, THE source of the CRD: typed pydantic models, one module per part of the spec.

- ``ragengine``: ``RAGEngineSpec``, the root, and the rules across its parts;
- ``inference`` (vLLM or an endpoint), ``engine`` (embedding, retrieval, pods, auth, guardrails, MCP, console),
  ``storage`` (volume, vector store, sessions, backups), ``observability``, ``access``, ``network``,
  ``evaluation``, ``sources`` (``spec.sources[]`` and ``spec.indexes[]``);
- ``core`` (the core/v1 shapes they share) and ``types`` (the base model and scalars);
- ``status``: what the operator writes (the CRD's status schema);
- ``schema``: the models as a Kubernetes structural schema.

hack/gen_crds.py turns these models into the CRD's structural schema (plus the CEL rules, printer
columns and short names in hack/crd-overlay.yaml); the controller parses every object's spec with the
same models. Rules that the API server enforces with CEL are mirrored in the validators so a spec that
slipped past an old CRD still fails loudly in the operator instead of half-working.

The package is the operator's floor above ``net``: it imports nothing of the operator but ``vllm_cli``
(.importlinter). The names below are the ones the rest of the operator takes from ``spec`` itself.
"""

from __future__ import annotations

from .core import PodOptions, SecretKeyRef
from .engine import AuthSpec
from .inference import MANAGED_VLLM_FLAGS, TOOL_FLAGS
from .observability import ObservabilitySpec
from .ragengine import RAGEngineSpec

__all__ = ["MANAGED_VLLM_FLAGS", "TOOL_FLAGS", "AuthSpec", "ObservabilitySpec", "PodOptions", "RAGEngineSpec",
           "SecretKeyRef"]
