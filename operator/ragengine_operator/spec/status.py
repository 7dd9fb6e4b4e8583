"""RAGEngine status (what the operator writes; the CRD's status schema is generated from it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .types import SpecModel


class SourceStatus(SpecModel):
    """The last sync of one source, as ``status.sources[]`` reports it (written by the operator only)."""

    name: str
    type: str = Field(description="configMap, git, http or s3.")
    index: str
    synced: bool = Field(description="The last sync of the current spec of this source succeeded.")
    revision: str | None = Field(None, description="Git commit id, HTTP or S3 ETag digest, or ConfigMap resourceVersion synced.")
    documents: int | None = Field(None, description="Documents of this source in its index.")
    chunks: int | None = Field(None, description="Chunks in the index after the sync.")
    skipped: int | None = Field(None, description="Files skipped (binary, unknown type, not UTF-8, too large).")
    last_sync_time: str | None = Field(None, description="When the last successful sync finished.")
    last_attempt_time: str | None = Field(None, description="When the last sync, successful or not, finished.")
    message: str = Field("", description="What the last sync did, or why it failed.")
    spec_digest: str | None = Field(None, description="Digest of the source's spec the last sync used.")
    last_handled_sync_request: str | None = Field(
        None, description="The last sync request handled: the ragengine.io/sync-now annotation's value, or a push's "
        "(as Flux's lastHandledReconcileAt).")


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


class IndexStatus(SpecModel):
    """One index as the engine last reported it (GET /health)."""

    name: str
    version: int | None = Field(None, description="The live version (docs/versions.md).")
    current: bool | None = Field(None, description="Whether the live version uses spec.embedding's model.")
    documents: int | None = None
    reindex_version: int | None = Field(None, description="The version a running re-index builds.")
    documents_done: int | None = Field(None, description="A running re-index: documents built so far.")
    documents_total: int | None = Field(None, description="A running re-index: documents to build.")
    rejected_version: int | None = Field(
        None, description="The version the last re-index built and its gate rejected (spec.evaluation.gate).")


class EvaluationStatus(SpecModel):
    """An index's last evaluation run on its golden set, as the engine last reported it (docs/evaluation.md)."""

    index: str
    run: str | None = None
    version: int | None = Field(None, description="The version scored.")
    trigger: str | None = Field(None, description="schedule, gate or api.")
    finished_at: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict, description="mrr@k, recall@k, ndcg@k, hit_rate@k.")
    previous_run: str | None = None
    previous_metrics: dict[str, float] | None = None


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
    indexes: list[IndexStatus] | None = Field(
        None, description="Each index's live version and re-index progress, as the engine last reported them "
        "(at most 100; the Reindexing condition sums them up).")
    evaluation: list[EvaluationStatus] | None = Field(
        None, description="Each index's last evaluation run (at most 100), as the engine last reported it.")
    embedding_target: str | None = Field(
        None, description="Digest of the embedding model the engine last reported as its target (it equals the "
        "spec's once the engine has picked up spec.embedding).")
    api_key_secret_ref: SecretKeySelector | None = Field(
        None, description="The Secret key clients send as 'Authorization: Bearer <key>' (generated or spec.auth's); "
        "unset when auth is off.")
