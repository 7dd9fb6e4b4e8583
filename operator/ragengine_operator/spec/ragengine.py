"""The root of the schema: ``RAGEngineSpec``, its parts (``spec/``'s other modules) and the rules across them."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from .access import AccessSpec
from .engine import (
    AuthSpec,
    ConsoleSpec,
    EmbeddingSpec,
    EngineSpec,
    GuardrailsSpec,
    MCPSpec,
    RetrievalSpec,
)
from .evaluation import EvaluationSpec
from .inference import InferenceSpec
from .observability import ObservabilitySpec
from .sources import IndexSettings, Source, effective_sources, unique_indexes, unique_names
from .storage import BackupSpec, StorageSpec
from .types import SpecModel


class RAGEngineSpec(SpecModel):
    """Desired state of a RAGEngine: inference (optional), embedding, retrieval, engine, storage, auth, access."""

    inference: InferenceSpec | None = Field(
        None, description="Generation backend; omit for retrieval-only (extractive answers)."
    )
    embedding: EmbeddingSpec = Field(default_factory=EmbeddingSpec, json_schema_extra={"default": {}})
    retrieval: RetrievalSpec = Field(default_factory=RetrievalSpec, json_schema_extra={"default": {}})
    engine: EngineSpec = Field(default_factory=EngineSpec, json_schema_extra={"default": {}})
    storage: StorageSpec = Field(default_factory=StorageSpec, json_schema_extra={"default": {}})
    auth: AuthSpec = Field(default_factory=AuthSpec, json_schema_extra={"default": {}})
    observability: ObservabilitySpec = Field(default_factory=ObservabilitySpec, json_schema_extra={"default": {}})
    access: AccessSpec | None = Field(
        None, description="Principals (keys, ServiceAccounts), roles, index patterns, groups and rate limits; rendered "
        "into the engine's access file (docs/access.md).")
    backup: BackupSpec | None = Field(
        None, description="Export every index on a schedule to a volume (a CronJob running the engine image's "
        "`ragengine export --all`); unset: none.")
    guardrails: GuardrailsSpec = Field(default_factory=GuardrailsSpec, json_schema_extra={"default": {}})
    mcp: MCPSpec = Field(default_factory=MCPSpec, json_schema_extra={"default": {}})
    console: ConsoleSpec = Field(default_factory=ConsoleSpec, json_schema_extra={"default": {}})
    evaluation: EvaluationSpec | None = Field(
        None, description="Score an index on a golden set on a schedule and before every re-index swaps "
        "(docs/evaluation.md); unset: none.")
    sources: Annotated[list[Source], AfterValidator(unique_names)] = Field(
        default_factory=list, max_length=32,
        description="Documents the indexes hold, synced by the operator from ConfigMaps, git repositories or "
        "HTTP URLs (docs/sources.md). Each index then holds exactly its sources' documents (plus any added by API).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    indexes: Annotated[list[IndexSettings], AfterValidator(unique_indexes)] = Field(
        default_factory=list, max_length=64,
        description="Settings of the indexes that sources fill, shared by all their sources: chunking and how files "
        "are read (OCR languages, formats); a source's own settings win (docs/sources.md).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @model_validator(mode="after")
    def _index_settings(self) -> RAGEngineSpec:
        effective_sources(self.sources, self.indexes)  # raises on two chunkings for one index
        return self

    @property
    def runs_vllm(self) -> bool:
        return self.inference is not None and self.inference.model is not None

    @property
    def evaluation_index(self) -> str | None:
        """The index spec.evaluation scores (its own, else its golden set's source's)."""
        ev = self.evaluation
        if ev is None:
            return None
        if ev.index is not None:
            return ev.index
        source = next((s for s in self.sources if ev.golden_set.source and s.name == ev.golden_set.source.name), None)
        return source.index_name if source is not None else None

    @model_validator(mode="after")
    def _evaluation_source(self) -> RAGEngineSpec:
        ref = self.evaluation.golden_set.source if self.evaluation is not None else None
        if ref is not None:
            found = next((s for s in self.sources if s.name == ref.name), None)
            if found is None:
                raise ValueError(f"evaluation.goldenSet.source names {ref.name!r}, which is not a spec.sources entry")
            if found.config_map is not None:
                raise ValueError("evaluation.goldenSet.source must be a git or http source (for a ConfigMap, use "
                                 "goldenSet.configMapRef)")
        return self

    @model_validator(mode="after")
    def _single_writer(self) -> RAGEngineSpec:
        several = self.engine.replicas > 1 or self.engine.autoscaling is not None
        store = self.storage.vector_store
        if not store.external and several:
            raise ValueError(FAISS_ONE_REPLICA)
        if store.type == "milvus" and several and self.storage.sessions.database_secret_ref is None:
            raise ValueError(MILVUS_SHARED_SESSIONS)
        return self


MILVUS_SHARED_SESSIONS = (
    "engine.replicas above 1 and engine.autoscaling with storage.vectorStore.type milvus need storage.sessions.databaseSecretRef "
    "(a PostgreSQL DSN): replicas must share sessions, threads and the upload queue"
)
FAISS_ONE_REPLICA = (
    "engine.replicas above 1 and engine.autoscaling need storage.vectorStore.type postgres or milvus: the faiss index "
    "lives on one ReadWriteOnce volume with a single writer"
)
