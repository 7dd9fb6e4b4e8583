"""OpenAI's Files and Vector Stores on the wire: request models (with OpenAI's field names, limits and
defaults) and the objects the routes answer, as published in ``/openapi.json``.

Requests are tolerant (``extra="allow"``: a field the SDK adds tomorrow is ignored, never a 400) except
inside the small nested objects whose every field the engine reads (chunking strategies, expiry), where a
typo is an error naming the field. Objects allow extra fields too: the file object carries the engine's
own ingestion fields beside OpenAI's (docs/openai.md).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_PAIRS = 16
MAX_KEY = 64
MAX_VALUE = 512
MAX_FILES_PER_REQUEST = 500
MAX_NUMBER = 2**53  # numbers every store (and JSON reader) keeps exactly


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- small shared pieces -----------------------------------------------------------------------------------
def check_pairs(value: dict[str, Any], what: str, *, scalars: tuple[type, ...],
                reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    """OpenAI's limits on ``metadata`` / ``attributes``: 16 pairs, keys of 64 characters, string values of 512;
    ``reserved`` keys are the engine's."""
    taken = sorted(set(value) & set(reserved))
    if taken:
        raise ValueError(f"{what} key {taken[0]!r} is reserved: the engine sets it on the file's chunks "
                         f"({', '.join(reserved)}; 'acl' is the document ACL, docs/access.md)")
    if len(value) > MAX_PAIRS:
        raise ValueError(f"{what} has {len(value)} keys; at most {MAX_PAIRS} are allowed")
    for key, item in value.items():
        if not key or len(key) > MAX_KEY:
            raise ValueError(f"{what} keys must be 1 to {MAX_KEY} characters")
        if not isinstance(item, scalars):
            kinds = " or ".join(t.__name__ for t in scalars)
            raise ValueError(f"{what}[{key!r}] must be a {kinds}")
        if isinstance(item, (int, float)) and not isinstance(item, bool) and not (
                math.isfinite(item) and abs(item) <= MAX_NUMBER):
            raise ValueError(f"{what}[{key!r}] must be a finite number of magnitude at most 2**53")
        if isinstance(item, str) and len(item) > MAX_VALUE:
            raise ValueError(f"{what}[{key!r}] is longer than {MAX_VALUE} characters")
    return value


Metadata = Annotated[dict[str, str], AfterValidator(lambda v: check_pairs(v, "metadata", scalars=(str,)))]
# What the engine writes into a file's chunk metadata itself; ``acl`` is a document ACL (a list), which
# attributes (scalars) could only make malformed, hiding the file from every non-admin.
RESERVED_ATTRIBUTES = ("file_id", "filename", "acl")
Attributes = Annotated[dict[str, str | bool | int | float],
                       AfterValidator(lambda v: check_pairs(v, "attributes", scalars=(str, bool, int, float),
                                                            reserved=RESERVED_ATTRIBUTES))]


class StaticChunking(_Strict):
    max_chunk_size_tokens: int = Field(..., ge=100, le=4096, description="Tokens per chunk (OpenAI: 100-4096). "
                                       "The engine caps it at its embedding model's window and the index's chunk size.")
    chunk_overlap_tokens: int = Field(..., ge=0, description="Tokens shared by neighbouring chunks; at most half "
                                      "of max_chunk_size_tokens.")

    @model_validator(mode="after")
    def _overlap(self) -> StaticChunking:
        if self.chunk_overlap_tokens > self.max_chunk_size_tokens // 2:
            raise ValueError("chunk_overlap_tokens must not exceed half of max_chunk_size_tokens")
        return self


class AutoChunkingStrategy(_Strict):
    type: Literal["auto"]


class StaticChunkingStrategy(_Strict):
    type: Literal["static"]
    static: StaticChunking


ChunkingStrategy = Annotated[AutoChunkingStrategy | StaticChunkingStrategy, Field(discriminator="type")]


class StoreExpiresAfter(_Strict):
    anchor: Literal["last_active_at"]
    days: int = Field(..., ge=1, le=365)


# --- vector stores -------------------------------------------------------------------------------------
class CreateVectorStoreRequest(_Tolerant):
    name: str | None = Field(None, max_length=512, description="Display name; defaults to the store's id.")
    description: str | None = Field(None, max_length=4096)
    file_ids: list[str] = Field(default_factory=list, max_length=MAX_FILES_PER_REQUEST,
                                description="Files (from POST /v1/files) to attach at once.")
    chunking_strategy: ChunkingStrategy | None = Field(None, description="For file_ids; default 'auto'.")
    metadata: Metadata | None = None
    expires_after: StoreExpiresAfter | None = None
    index_name: str | None = Field(
        None, description="The engine's extension: the name of the store's index (also its id). Unset: a new "
        "'vs_<hex>' index. Principals limited to index patterns name one inside them (docs/access.md).")



class UpdateVectorStoreRequest(_Tolerant):
    name: str | None = Field(None, max_length=512)
    metadata: Metadata | None = None
    expires_after: StoreExpiresAfter | None = None



class CreateVectorStoreFileRequest(_Tolerant):
    file_id: str = Field(..., min_length=1, max_length=64)
    attributes: Attributes | None = Field(None, description="Filterable key-value pairs; they become the "
                                          "metadata of the file's chunks in the index.")
    chunking_strategy: ChunkingStrategy | None = None



class UpdateVectorStoreFileRequest(_Tolerant):
    attributes: Attributes | None



class BatchFile(_Tolerant):
    file_id: str = Field(..., min_length=1, max_length=64)
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategy | None = None



class CreateFileBatchRequest(_Tolerant):
    file_ids: list[str] | None = Field(None, max_length=MAX_FILES_PER_REQUEST)
    files: list[BatchFile] | None = Field(None, max_length=MAX_FILES_PER_REQUEST,
                                          description="Per-file attributes and chunking (instead of file_ids).")
    attributes: Attributes | None = None
    chunking_strategy: ChunkingStrategy | None = None


    @model_validator(mode="after")
    def _one_list(self) -> CreateFileBatchRequest:
        if (self.file_ids is None) == (self.files is None):
            raise ValueError("give exactly one of file_ids and files")
        if not (self.file_ids or self.files):
            raise ValueError("the batch has no files")
        return self


class RankingOptions(_Tolerant):
    ranker: Literal["none", "auto", "default-2024-11-15"] | None = Field(
        None, description="Accepted; the engine ranks with its configured fusion and reranker (docs/openai.md).")
    score_threshold: float | None = Field(None, ge=0.0, le=1.0, description="Drop results scoring below this.")


class SearchRequest(_Tolerant):
    query: str | list[str] = Field(..., description="One query, or several (results merged, best score kept).")
    max_num_results: int = Field(10, ge=1, le=50)
    filters: dict[str, Any] | None = Field(
        None, description="OpenAI comparison ({type: eq|ne|gt|gte|lt|lte|in|nin, key, value}) or compound "
        "({type: and|or, filters}) filter on file attributes.")
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = Field(False, description="Rewrite the query for search with the LLM (unchanged without one).")

    @field_validator("query")
    @classmethod
    def _query(cls, value: str | list[str]) -> str | list[str]:
        queries = [value] if isinstance(value, str) else value
        if not queries or len(queries) > 10 or any(not q.strip() for q in queries):
            raise ValueError("give 1 to 10 non-empty queries")
        return value


# --- objects answered -------------------------------------------------------------------------------------
class FileCounts(BaseModel):
    in_progress: int
    completed: int
    failed: int
    cancelled: int
    total: int


class VectorStoreObject(_Tolerant):
    id: str
    object: Literal["vector_store"]
    created_at: int
    name: str
    usage_bytes: int
    file_counts: FileCounts
    status: Literal["expired", "in_progress", "completed"]
    expires_after: dict[str, Any] | None = None
    expires_at: int | None = None
    last_active_at: int | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class LastError(BaseModel):
    code: Literal["server_error", "unsupported_file", "invalid_file"]
    message: str


class VectorStoreFileObject(_Tolerant):
    id: str
    object: Literal["vector_store.file"]
    created_at: int
    vector_store_id: str
    status: Literal["in_progress", "completed", "cancelled", "failed"]
    last_error: LastError | None = None
    usage_bytes: int
    attributes: dict[str, Any] | None = None
    chunking_strategy: dict[str, Any] | None = None


class FileBatchObject(_Tolerant):
    id: str
    object: Literal["vector_store.files_batch"]
    created_at: int
    vector_store_id: str
    status: Literal["in_progress", "completed", "cancelled", "failed"]
    file_counts: FileCounts


class Deleted(BaseModel):
    id: str
    object: str
    deleted: bool


class FileObject(_Tolerant):
    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"]
    status_details: str | None = None
    expires_at: int | None = None


class _List(_Tolerant):
    object: Literal["list"]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool


class FileList(_List):
    data: list[FileObject]


class VectorStoreList(_List):
    data: list[VectorStoreObject]


class VectorStoreFileList(_List):
    data: list[VectorStoreFileObject]


class SearchContent(BaseModel):
    type: Literal["text"]
    text: str


class SearchResult(BaseModel):
    file_id: str
    filename: str
    score: float
    attributes: dict[str, Any] | None = None
    content: list[SearchContent]


class SearchPage(_Tolerant):
    object: Literal["vector_store.search_results.page"]
    search_query: list[str]
    data: list[SearchResult]
    has_more: bool
    next_page: str | None = None


class FileContentPage(_Tolerant):
    object: Literal["vector_store.file_content.page"]
    data: list[SearchContent]
    has_more: bool
    next_page: str | None = None
