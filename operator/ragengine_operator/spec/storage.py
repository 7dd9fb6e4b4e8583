"""spec.storage and spec.backup: the engine's volume, the vector store of the indexes, the sessions' database,
and the scheduled exports."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .core import SecretKeyRef, Size, VolumeSpec
from .types import Name, SpecModel


class HNSWSpec(SpecModel):
    """HNSW graph parameters of the external store's vector index (the engine's defaults when unset)."""

    m: int | None = Field(None, ge=4, le=128, description="Links per node.")
    ef_construction: int | None = Field(None, ge=8, le=4096, description="Build breadth (recall vs build time).")
    ef_search: int | None = Field(None, ge=8, le=4096, description="Search breadth (recall vs latency).")
    threshold: int | None = Field(
        None, ge=0, le=100_000_000,
        description="PostgreSQL: an index with more chunks than this gets its own HNSW index, built in one pass once "
                    "its writes pause (bulk loads are not slowed by it); smaller indexes are searched exactly. "
                    "Engine default 10000.")


class ConnectionSecretRef(SecretKeyRef):
    """The Secret key holding the store's DSN or URI (it carries credentials: never inline)."""

    key: Annotated[str, Field(min_length=1, max_length=253)] = Field("url", description="Key in the Secret.")


class VectorStoreSpec(SpecModel):
    """Where the indexes live: embedded FAISS on the engine's volume, or an external store shared by replicas."""

    type: Literal["faiss", "postgres", "milvus"] = Field(
        "faiss", description="faiss: embedded, one replica. postgres (pgvector) or milvus: several replicas, no volume."
    )
    connection_secret_ref: ConnectionSecretRef | None = Field(
        None, description="postgres/milvus: the Secret key with the DSN (postgresql://...) or Milvus URI."
    )
    prefix: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,39}$")] | None = Field(
        None, description="Schema / collection prefix; default: derived from the namespace and name (unique)."
    )
    hnsw: HNSWSpec = Field(default_factory=HNSWSpec, json_schema_extra={"default": {}})
    compression: Literal["none", "sq8"] | None = Field(
        None,
        description="faiss: 'sq8' keeps each HNSW index's vectors as 8-bit codes, a quarter of the vectors' memory "
                    "(docs/stores.md measures memory and recall); 'none' keeps float vectors. Engine default sq8. "
                    "Applies when an index's HNSW is built; an existing HNSW index keeps its format.")
    keyword_index: Literal["memory", "database"] | None = Field(
        None,
        description="postgres: 'memory' answers unfiltered keyword searches from each engine replica's own BM25 "
                    "index of the indexes it serves, kept in step with every replica's writes (10 ms p50 at a "
                    "million chunks, about 600 bytes of engine memory per chunk); 'database' always asks "
                    "PostgreSQL's full-text search. Engine default memory.")

    @property
    def external(self) -> bool:
        return self.type != "faiss"

    @model_validator(mode="after")
    def _connection(self) -> VectorStoreSpec:
        if self.external and self.connection_secret_ref is None:
            raise ValueError("storage.vectorStore.connectionSecretRef is required for postgres and milvus")
        if not self.external and self.connection_secret_ref is not None:
            raise ValueError("storage.vectorStore.connectionSecretRef applies to postgres and milvus only")
        if self.external and self.compression not in (None, "none"):
            raise ValueError("storage.vectorStore.compression applies to faiss only")
        if self.type != "postgres" and self.hnsw.threshold is not None:
            raise ValueError("storage.vectorStore.hnsw.threshold applies to postgres only")
        if self.type != "postgres" and self.keyword_index is not None:
            raise ValueError("storage.vectorStore.keywordIndex applies to postgres only")
        return self


class SessionsSpec(SpecModel):
    """Where chat sessions, threads and uploads (bytes and ingestion jobs) live."""

    database_secret_ref: ConnectionSecretRef | None = Field(
        None, description="A Secret key with a PostgreSQL DSN. Default: the postgres vector store's DSN, else "
        "SQLite on the engine's volume. Required with storage.vectorStore.type milvus and more than one engine replica: "
        "replicas must share sessions and the upload queue.",
    )


class DataVolumeSpec(VolumeSpec):
    """The engine's PVC: FAISS indexes and journals, SQLite sessions and uploads, the embedding model cache."""

    reclaim_policy: Literal["Retain", "Delete"] = Field(
        "Retain",
        description="What happens to the engine's data volume and the model cache when the RAGEngine is deleted. "
        "Retain (default, as a StatefulSet's claims): the PVCs stay, and a RAGEngine created again with the same "
        "name adopts them, indexes and downloaded weights included. Delete: they go with the RAGEngine.",
    )


class StorageSpec(SpecModel):
    """Where the RAGEngine's data lives (KAITO's storage: its volume and its vector database): the engine's
    volume, the vector store that holds the indexes, and the database of sessions and uploads."""

    volume: DataVolumeSpec = Field(default_factory=DataVolumeSpec, json_schema_extra={"default": {}})
    vector_store: VectorStoreSpec = Field(default_factory=VectorStoreSpec, json_schema_extra={"default": {}})
    sessions: SessionsSpec = Field(default_factory=SessionsSpec, json_schema_extra={"default": {}})


# Five cron fields (minute hour day-of-month month day-of-week) of digits, '*', ',', '-' and '/', or a macro.
CRON = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([0-9*,/-]+ ){4}[0-9*,/-]+)$"


class BackupVolumeSpec(SpecModel):
    """Where the backups go: an existing PVC (claimName), or one the operator creates (<name>-backup)."""

    claim_name: Name | None = Field(None, description="An existing PersistentVolumeClaim; size and class then unused.")
    size: Size = Field("10Gi", description="The created claim's size (it can grow, never shrink).")
    storage_class_name: Annotated[str, Field(max_length=253)] | None = Field(
        None, description="The created claim's StorageClass; the cluster default when unset.")


class BackupSpec(SpecModel):
    """A CronJob that exports every index to a volume (GET /indexes/{name}/export: portable, compressed,
    checksummed files that POST /indexes/{name}/import or `ragengine import` restores on any store)."""

    schedule: Annotated[str, Field(max_length=128, pattern=CRON)] = Field(
        description="When, as a cron schedule (e.g. '0 3 * * *') in the CronJob's time zone (the controller's, UTC "
        "by default).")
    retention: int = Field(7, ge=1, le=1000, description="Export files kept per index (the newest).")
    volume: BackupVolumeSpec = Field(default_factory=BackupVolumeSpec, json_schema_extra={"default": {}})
