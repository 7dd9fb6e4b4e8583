"""The tables, as SQLAlchemy Core objects bound to one schema (the RAGEngine's ``vector_store_prefix``).

The queries are built from these objects, so identifiers are quoted by SQLAlchemy and every value is a
bound parameter. The migrations in ``migrations/versions`` create exactly these tables; a test checks
that the migrated database and these objects agree.

- ``indexes``: one row per index with its chunking config (fixed when the index is created).
- ``documents``: the full text and metadata of each document; ``pos`` keeps insertion order for
  listing (an update moves a document to the end, as in the FAISS store).
- ``chunks``: the text the model embedded, its vector (HNSW, cosine), a generated ``tsvector`` for the
  keyword side, and a copy of the document's metadata so filters need no join. Deleting a document
  deletes its chunks (``ON DELETE CASCADE``); dropping an index deletes its documents.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Column,
    Computed,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Integer,
    MetaData,
    Table,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR

TEXT_SEARCH_CONFIG = "english"  # stemming + stop words for the keyword side


@dataclass(frozen=True)
class Tables:
    metadata: MetaData
    indexes: Table
    documents: Table
    chunks: Table


def tables(schema: str, dim: int) -> Tables:
    md = MetaData(schema=schema)
    indexes = Table(
        "indexes", md,
        Column("name", Text, primary_key=True),
        Column("config", JSONB, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )
    documents = Table(
        "documents", md,
        Column("index_name", Text, ForeignKey(indexes.c.name, ondelete="CASCADE"), primary_key=True),
        Column("doc_id", Text, primary_key=True),
        Column("pos", BigInteger, Identity(), nullable=False),
        Column("text", Text, nullable=False),
        Column("metadata", JSONB, nullable=False),
    )
    chunks = Table(
        "chunks", md,
        Column("id", BigInteger, Identity(), primary_key=True),
        Column("index_name", Text, nullable=False),
        Column("doc_id", Text, nullable=False),
        Column("seq", Integer, nullable=False),
        Column("text", Text, nullable=False),
        Column("search_text", Text, nullable=False),  # the keyword side's text (contextual chunks differ)
        Column("metadata", JSONB, nullable=False),
        Column("embedding", Vector(dim), nullable=False),
        Column("tsv", TSVECTOR, Computed(f"to_tsvector('{TEXT_SEARCH_CONFIG}', search_text)", persisted=True)),
        ForeignKeyConstraint(["index_name", "doc_id"], [documents.c.index_name, documents.c.doc_id], ondelete="CASCADE"),
    )
    return Tables(md, indexes, documents, chunks)
