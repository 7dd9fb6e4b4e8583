"""The tables, as SQLAlchemy Core objects bound to one schema (the RAGEngine's ``vector_store_prefix``).

The queries are built from these objects, so identifiers are quoted by SQLAlchemy and every value is a
bound parameter. The migrations in ``migrations/versions`` create exactly these tables; a test checks
that the migrated database and these objects agree.

- ``indexes``: one row per index with its chunking config (fixed when the index is created) and, when it
  differs from ``chunks``'s, the dimension of its vectors (an index version of another model).
- ``documents``: the full text and metadata of each document; ``pos`` keeps insertion order for
  listing (an update moves a document to the end, as in the FAISS store).
- ``chunks``: the text the model embedded, its vector (HNSW, cosine), a generated ``tsvector`` for the
  keyword side, and a copy of the document's metadata so filters need no join. Deleting a document
  deletes its chunks (``ON DELETE CASCADE``); dropping an index deletes its documents.
- ``chunks_d<dim>``: the same as ``chunks`` for the indexes whose vectors have another dimension (a version
  built with another embedding model, docs/versions.md): one table per dimension, created when the first
  such index is (``dim_chunks``), with its own HNSW index.
- ``index_versions``: each index's version book (ragengine.versions.book) as JSON, and under the name ""
  the replicas' heartbeats (which embedding models each has loaded).
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
    Index,
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
    versions: Table
    dim: int  # of ``chunks``


def _chunks(md: MetaData, name: str, dim: int, documents: Table) -> Table:
    return Table(
        name, md,
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


def chunk_indexes(table: Table, hnsw_m: int, ef_construction: int) -> list[Index]:
    """The secondary indexes of a chunks table (the 0001 migration's names for ``chunks``)."""
    prefix = "chunks" if table.name == "chunks" else table.name
    return [
        Index(f"{prefix}_doc", table.c.index_name, table.c.doc_id),
        Index(f"{prefix}_tsv", table.c.tsv, postgresql_using="gin"),
        Index(f"{prefix}_embedding_hnsw", table.c.embedding, postgresql_using="hnsw",
              postgresql_with={"m": int(hnsw_m), "ef_construction": int(ef_construction)},
              postgresql_ops={"embedding": "vector_cosine_ops"}),
    ]


def dim_chunks(t: Tables, dim: int) -> Table:
    """The chunks table of ``dim``-dimensional indexes: ``chunks`` for the schema's own dimension."""
    name = f"chunks_d{dim}"
    if t.dim == dim:
        return t.chunks
    found = t.metadata.tables.get(f"{t.metadata.schema}.{name}")
    return found if found is not None else _chunks(t.metadata, name, dim, t.documents)


def tables(schema: str, dim: int) -> Tables:
    md = MetaData(schema=schema)
    indexes = Table(
        "indexes", md,
        Column("name", Text, primary_key=True),
        Column("config", JSONB, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("dim", Integer, nullable=True),  # NULL: the dimension of ``chunks``
    )
    documents = Table(
        "documents", md,
        Column("index_name", Text, ForeignKey(indexes.c.name, ondelete="CASCADE"), primary_key=True),
        Column("doc_id", Text, primary_key=True),
        Column("pos", BigInteger, Identity(), nullable=False),
        Column("text", Text, nullable=False),
        Column("metadata", JSONB, nullable=False),
    )
    chunks = _chunks(md, "chunks", dim, documents)
    versions = Table(
        "index_versions", md,
        Column("name", Text, primary_key=True),
        Column("book", JSONB, nullable=False),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )
    return Tables(md, indexes, documents, chunks, versions, dim)
