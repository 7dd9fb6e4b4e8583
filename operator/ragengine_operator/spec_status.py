"""RAGEngine status (what the operator writes; the CRD's status schema is generated from it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .sources.spec import SourceStatus
from .spec_types import SpecModel


class Condition(SpecModel):
    """A metav1.Condition."""

    type: Annotated[str, Field(max_length=316)]
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, Field(max_length=1024)]
    message: Annotated[str, Field(max_length=32768)] = ""
    last_transition_time: str
    observed_generation: int | None = None


class SecretKeySelector(SpecModel):
    name: str
    key: str


class RAGEngineStatus(SpecModel):
    observed_generation: int | None = Field(None, description="The generation the conditions describe.")
    inference_replicas: int | None = Field(None, description="Ready vLLM pods (the scale subresource's status).")
    data_volume_size: str | None = Field(None, description="Size the engine's data PVC has now (a spec may shrink back to it).")
    model_cache_volume_size: str | None = Field(None, description="Size the model-cache PVC has now.")
    inference_selector: str | None = Field(None, description="Label selector of the vLLM pods (for the scale subresource).")
    endpoint: str | None = Field(None, description="In-cluster URL of the engine's OpenAI-compatible API.")
    inference_url: str | None = Field(None, description="The LLM base URL the engine uses.")
    model: str | None = Field(None, description="The served model name.")
    conditions: list[Condition] = Field(default_factory=list)
    sources: list[SourceStatus] | None = Field(None, description="The last sync of each spec.sources entry.")
    api_key_secret_ref: SecretKeySelector | None = Field(
        None, description="The Secret key clients send as 'Authorization: Bearer <key>' (generated or spec.auth's); "
        "unset when auth is off.")
