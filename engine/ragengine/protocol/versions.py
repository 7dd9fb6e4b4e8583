"""Request and response models of the index version routes: re-index, versions, activate, export / import."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ragengine.protocol.evaluations import GateRequest
from ragengine.protocol.indexes import ChunkingOptions


class ReindexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunking: ChunkingOptions | None = Field(
        None, description="The new version's chunking, over the live version's (unset keys keep it)."
    )
    embedding_model: str | None = Field(
        None, min_length=1, max_length=1024,
        description="The new version's embedding model ('package:<module>', 'wordllama:<config>', a path or a "
        "hub name); default: the engine's current model. It is loaded before the answer: a model that cannot "
        "load is a 503 now, not a failed job later.",
    )
    only_if_changed: bool = Field(
        False, description="Start nothing (200) when the live version, or the one being built, already has this "
        "model and chunking (the operator's source syncs send this when a source's chunking is set)."
    )
    gate: GateRequest | None = Field(
        None, description="Swap only when the new version scores at least as well on a golden set (docs/evaluation.md);"
        " unset: the engine's configured gate, if any (its evaluation file), else swap when built."
    )


class VersionOut(BaseModel):
    version: int
    state: str = Field(description="live, building (a running re-index), retired (kept for rollback), rejected (built, "
                       "but its gate failed: an admin may still activate it) or failed.")
    embedding_model: str | None = Field(description="The model that embedded it (None: unknown, from before versions).")
    dim: int
    chunking: dict[str, Any]
    created_at: float
    activated_at: float | None = None
    evaluation: dict[str, Any] | None = Field(None, description="A gated build: the gate's verdict and both scores.")
    documents: int | None = None
    chunks: int | None = None


class JobOut(BaseModel):
    id: str
    kind: str = Field(description="reindex (build a new version) or activate (bring a retired one up to date, swap).")
    version: int = Field(description="The version the job builds or activates.")
    state: str = Field(description="running, succeeded, failed or rejected (built, not swapped: the gate failed).")
    gate: dict[str, Any] | None = Field(None, description="The gate this job applies before its swap.")
    documents_done: int
    documents_total: int
    message: str
    started_at: float
    finished_at: float | None = None


class VersionsResponse(BaseModel):
    index: str
    live_version: int
    embedding_model: str | None = Field(description="The live version's embedding model.")
    current: bool | None = Field(None, description="Whether the live version uses the engine's current model.")
    versions: list[VersionOut]
    job: JobOut | None = Field(None, description="The running job, else the last one.")


class ImportResponse(BaseModel):
    index: str
    documents: int
    chunks: int
    vectors: str = Field(description="'reused' (the export's model is the engine's) or 're-embedded'.")
    source_index: str | None = None
    source_embedding_model: str | None = None
    embedding_model: str
