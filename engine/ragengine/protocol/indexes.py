"""Request and response models of the KAITO-compatible index API (field names as KAITO's ``models.py``).

Unknown request fields are accepted and ignored, so newer clients never get a 422 for an extra key.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="ignore")


class DocumentIn(_Tolerant):
    text: str = Field(..., description="The document's text (must not be empty).")
    metadata: dict[str, Any] | None = Field(
        None, description="Free-form metadata; 'split_type': 'code' with 'language' selects code splitting."
    )
    doc_id: str | None = Field(None, description="Your id for the document; default: sha256 hex of the text.")
    hash_value: str | None = None
    is_truncated: bool = False


class DocumentOut(BaseModel):
    doc_id: str
    text: str
    metadata: dict[str, Any] | None = None
    hash_value: str | None = None
    is_truncated: bool = False


class ChunkingOptions(_Tolerant):
    chunk_size: int | None = Field(None, ge=0, description="Tokens per chunk; capped at the embedder's maximum.")
    chunk_overlap: int | None = Field(None, ge=0, description="Tokens shared by neighbouring chunks.")
    splitter: str | None = Field(None, description="'sentence' (default) or 'token'.")
    contextual: bool | None = Field(
        None, description="Embed and keyword-index each chunk with its document's 'title' metadata and section "
        "headings (Markdown / reStructuredText); results still return the chunk alone. Default: settings.chunk_context."
    )


class IndexRequest(_Tolerant):
    index_name: str = Field(..., description="Created when new, appended to otherwise.")
    documents: list[DocumentIn]
    chunking: ChunkingOptions | None = Field(None, description="Chunking for a NEW index (ignored afterwards).")


class UpdateDocumentsRequest(_Tolerant):
    documents: list[DocumentIn]


class MetadataUpdate(_Tolerant):
    doc_id: str = Field(..., min_length=1, description="The document whose metadata is replaced.")
    metadata: dict[str, Any] = Field(..., description="Its whole new metadata (not merged with the old).")


class UpdateMetadataRequest(_Tolerant):
    documents: list[MetadataUpdate] = Field(..., max_length=1000)


class UpdateDocumentsResponse(BaseModel):
    updated_documents: list[DocumentOut]
    unchanged_documents: list[DocumentOut]
    not_found_documents: list[DocumentOut]


class DeleteDocumentsRequest(_Tolerant):
    doc_ids: list[str]


class DeleteDocumentsResponse(BaseModel):
    deleted_doc_ids: list[str]
    not_found_doc_ids: list[str]


class ListDocumentsResponse(BaseModel):
    documents: list[DocumentOut]
    count: int
    total_items: int


class RetrieveRequest(_Tolerant):
    index_name: str
    query: str
    max_node_count: int = Field(5, ge=1, description="Results wanted, 1..settings.max_top_k (default 300).")
    metadata_filter: dict[str, Any] | None = Field(None, description="KAITO style: exact match on every key (AND).")
    filters: dict[str, Any] | None = Field(
        None, description="OpenAI style: {type: eq|ne|gt|gte|lt|lte|in|nin, key, value} or {type: and|or, filters}."
    )
    max_chunks_per_document: int | None = Field(
        None, ge=1, description="Document-level results: at most this many chunks of any one document (unset = no cap)."
    )
    long_query_windows: bool | None = Field(
        None, description="Embed a query longer than the embedding model's window window by window (unset = the "
        "engine's long_query_windows setting, off by default); false cuts it at the window."
    )
    explain: bool = Field(
        False, description="Say why each result came back: its rank in the dense and keyword candidate lists and its "
        "fused score, and the engine's fusion settings and chat similarity threshold ('explain' in the answer)."
    )


class RetrieveResult(BaseModel):
    doc_id: str
    node_id: str
    text: str
    score: float = Field(..., description="Cosine similarity clamped to [0, 1]; higher is better.")
    dense_score: float | None = None
    sparse_score: float | None = Field(None, description="Raw BM25 score when BM25 matched the chunk.")
    metadata: dict[str, Any] | None = None
    # explain only (absent otherwise)
    dense_rank: int | None = Field(None, description="explain: place in the dense candidate list (1 = best; null: "
                                   "not among the dense candidates).")
    sparse_rank: int | None = Field(None, description="explain: place in the keyword (BM25) candidate list (1 = best; "
                                    "null: not among the keyword candidates).")
    fused_score: float | None = Field(None, description="explain: the fused score that ordered the results (null "
                                      "without hybrid search).")


class RetrieveExplain(BaseModel):
    """How the engine searched: what a result's ranks and scores are measured against."""

    hybrid: bool = Field(..., description="Dense and keyword lists fused; false: dense only.")
    fusion: str = Field(..., description="'convex' or 'rrf' (settings.fusion).")
    dense_weight: float = Field(..., description="Share of the dense list in the fusion.")
    candidates: int = Field(..., description="Candidates each list brings to the fusion (at least).")
    reranked: bool = Field(..., description="A cross-encoder reordered the fused results.")
    similarity_threshold: float = Field(..., description="A chunk enters a chat answer's context only with a score "
                                        "at least this (settings.similarity_threshold).")


class RetrieveResponse(BaseModel):
    query: str
    results: list[RetrieveResult]
    count: int
    explain: RetrieveExplain | None = Field(None, description="With explain: true only.")


class MessageResponse(BaseModel):
    message: str
