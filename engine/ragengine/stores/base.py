"""The contract between the engine's shared index logic and an external vector store.

An adapter is synchronous (the registry calls it from worker threads) and knows nothing of HTTP,
chunking or embedding: it stores what it is given and answers searches. What it must guarantee:

- ``write`` is atomic: the index row (created on first write), the deleted documents, the new
  documents, their chunks and vectors are committed together or not at all. When it returns, every
  replica sees the write.
- ``write`` refuses, with ``DocumentRace``, to add a document that another writer added meanwhile
  with other text (the check the registry did before embedding is repeated inside the transaction).
- Scores: ``dense`` and ``keyword`` return the cosine similarity between the query vector and each
  hit's stored vector, computed by the store from the same unit vectors the FAISS backend holds, so a
  ``similarity_threshold`` means the same on every backend. ``keyword_score`` is the store's own
  keyword rank (BM25 in FAISS and in PostgreSQL's in-memory mirror, ``ts_rank_cd`` on its SQL leg): comparable
  within one result list only.
- A chunk's ``tokens`` (its LLM token counts by tokenizer identity, see ``index.chunk_tokens``) and its
  ``place`` (heading path, page, slide, ...: ``index.places``, computed from the document's text when
  the chunk is written, since a hit has only the chunk's) are stored with the chunk and come back on
  its hits and in ``chunk_vectors``; ``chunk_metadata`` / ``split_chunk_metadata`` keep them in the
  chunk row's metadata under reserved keys, never in the document's.
- Filters arrive as the parsed tree of ``ragengine.retrieval.filters`` and must select exactly the
  documents ``filters.matches`` selects, with values bound as parameters (never formatted into a query).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ragengine.index.documents import DocSearch
from ragengine.retrieval.filters import Filter


class StoreUnavailable(Exception):
    """The store cannot serve (unreachable, wrong credentials, missing extension, schema mismatch)."""


class StoreRefused(Exception):
    """The store refused a request's data (PostgreSQL: a NUL character in text, which its text type cannot
    hold): the caller's fault, not the store's, which still serves."""


class NoSuchIndex(KeyError):
    """A search named an index the store does not hold (never made, or dropped through another replica).
    The legs report it themselves, so a search needs no separate existence check before it."""


class DocumentRace(Exception):
    """Another writer added the same document id with other text between the check and the write."""

    def __init__(self, doc_id: str) -> None:
        super().__init__(doc_id)
        self.doc_id = doc_id


@dataclass(frozen=True)
class ChunkWrite:
    seq: int
    text: str  # what clients and prompts get
    search_text: str | None = None  # what keyword search indexes (contextual chunks: title + path + text)
    tokens: dict[str, int] | None = None  # LLM token counts by tokenizer identity (index.chunk_tokens)
    place: dict | None = None  # where the chunk is in its document (index.places.chunk_place)

    @property
    def indexed_text(self) -> str:
        return self.text if self.search_text is None else self.search_text


@dataclass(frozen=True)
class DocWrite:
    doc_id: str
    text: str
    metadata: dict
    chunks: list[ChunkWrite]


@dataclass(frozen=True)
class StoredDoc:
    doc_id: str
    text: str
    metadata: dict


@dataclass(frozen=True)
class Hit:
    doc_id: str
    seq: int
    text: str
    metadata: dict
    cosine: float
    keyword_score: float | None = None
    tokens: dict[str, int] | None = None
    place: dict | None = None


# The chunk row's metadata (a copy of its document's, for filters) also carries the chunk's token counts
# and its place in the document.
TOKENS_KEY = "_ragengine_tokens"
PLACE_KEY = "_ragengine_place"


def chunk_metadata(doc_metadata: dict, tokens: dict[str, int] | None, place: dict | None = None) -> dict:
    if not tokens and not place:
        return doc_metadata
    return {**doc_metadata, **({TOKENS_KEY: tokens} if tokens else {}), **({PLACE_KEY: place} if place else {})}


def split_chunk_metadata(metadata: dict) -> tuple[dict, dict[str, int] | None, dict | None]:
    """A chunk row's metadata → (its document's metadata, the chunk's token counts, its place)."""
    if TOKENS_KEY not in metadata and PLACE_KEY not in metadata:
        return metadata, None, None
    rest = dict(metadata)
    return rest, rest.pop(TOKENS_KEY, None) or None, rest.pop(PLACE_KEY, None) or None


class StoreAdapter(Protocol):
    kind: str

    def open(self) -> None:
        """Connect and bring the schema to the current version; raises StoreUnavailable with the reason."""

    def close(self) -> None: ...

    def ping(self) -> None:
        """Raise StoreUnavailable when the store cannot serve right now."""

    def maintain(self) -> list[str]:
        """Background upkeep, run every few seconds by the registry (PostgreSQL: HNSW indexes built once
        writes pause; Milvus builds its own). Returns what it did, for logs and tests."""

    def indexes(self) -> dict[str, dict]:
        """Every index name with its chunking config."""

    def counts(self) -> dict[str, tuple[int, int]]:
        """Every index name with (documents, chunks)."""

    def drop_index(self, name: str) -> bool: ...

    def get_documents(self, name: str, doc_ids: list[str]) -> dict[str, StoredDoc]: ...

    def chunk_vectors(self, name: str, doc_id: str) -> tuple[list[ChunkWrite], np.ndarray]:
        """A document's chunks and their stored vectors (metadata-only updates reuse them)."""

    def write(self, name: str, config: dict, delete: list[str], add: list[DocWrite], vectors: np.ndarray | None,
              *, add_only: bool, dim: int | None = None, source: str | None = None) -> None:
        """Atomically: ensure the index, delete ``delete``, insert ``add`` (vectors row-aligned with the
        chunks of ``add`` in order). ``add_only``: skip documents that exist with the same text and raise
        DocumentRace for one that exists with other text. ``dim``: a new index's vector dimension (each
        index keeps its own: versions of several models live side by side). ``source``: write only the
        documents index ``source`` holds with the same text and metadata (an index version being built
        from it never gets an older copy over a newer write)."""

    def dim_of(self, name: str) -> int | None:
        """The dimension of the index's vectors; None when there is no such index."""

    def digests(self, name: str) -> dict[str, str]:
        """doc_id -> a digest of the document's text and metadata (comparing two versions of an index)."""

    def chunks_of(self, name: str, doc_ids: list[str]) -> dict[str, tuple[list[ChunkWrite], np.ndarray]]:
        """Per document: its chunks in order and their stored vectors."""

    def books(self) -> dict[str, dict]:
        """Every index's version book (ragengine.versions.book), by index name."""

    def book_update(self, name: str, change: Callable[[dict | None], dict | None]) -> dict | None:
        """Read-modify-write one book, atomically across replicas where the store can."""

    def list_documents(self, name: str, flt: Filter | None, offset: int, limit: int,
                       search: DocSearch | None = None) -> tuple[list[StoredDoc], int]:
        """A page of documents in insertion order, and how many match ``flt`` and ``search`` in all."""

    def dense(self, name: str, query: np.ndarray, k: int, flt: Filter | None) -> list[Hit]: ...

    def keyword(self, name: str, query: str, query_vector: np.ndarray, k: int, flt: Filter | None) -> list[Hit]: ...


def describe(exc: BaseException) -> str:
    """A one-line reason from a driver exception (first line, no traceback)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

