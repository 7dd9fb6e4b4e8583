"""The tables, as SQLAlchemy Core objects bound to one schema (the RAGEngine's ``vector_store_prefix``).

The queries are built from these objects, so identifiers are quoted by SQLAlchemy and every value is a
bound parameter. The migrations in ``migrations/versions`` create exactly these tables; a test checks
that the migrated database and these objects agree.

- ``indexes``: one row per index with its chunking config (fixed when the index is created) and, when it
  differs from ``chunks``'s, the dimension of its vectors (an index version of another model).
- ``documents``: the full text and metadata of each document; ``pos`` keeps insertion order for
  listing (an update moves a document to the end, as in the FAISS store).
- ``chunks``: the text the model embedded, its vector, a generated ``tsvector`` for the keyword side, and
  a copy of the document's metadata so filters need no join. Deleting a document deletes its chunks
  (``ON DELETE CASCADE``); dropping an index deletes its documents. Partitioned by index (``LIST
  (index_name)``): each index's chunks live in their own table (``leaf_name``), created with the index,
  so an index gets an HNSW index of its own, built once after a bulk load instead of row by row
  (``hnsw_ddl``), and dropping an index drops its table instead of deleting its rows. The full-text (GIN)
  and document indexes are declared on the parent and so exist on every leaf.
- ``chunks_d<dim>``: the same as ``chunks`` for the indexes whose vectors have another dimension (a version
  built with another embedding model, docs/versions.md): one partitioned table per dimension, created
  when the first such index is (``dim_chunks``).
- ``indexes`` also keeps each index's document and chunk counts (kept in the write's transaction, so
  counting never scans a table) and ``change_seq``, the number of writes committed to it: a write takes the
  row's lock to raise it, so one index's writes commit in that order; each chunk carries the write that
  added it (``added_in``) and ``chunk_removals`` logs the chunks each write removed. Together they let a
  replica's in-engine keyword index (``keyword_mirror``) catch up with what others wrote.
- ``index_versions``: each index's version book (ragengine.versions.book) as JSON, and under the name ""
  the replicas' heartbeats (which embedding models each has loaded).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

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
    PrimaryKeyConstraint,
    Sequence,
    Table,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.engine import Connection

TEXT_SEARCH_CONFIG = "english"  # stemming + stop words for the keyword side


@dataclass(frozen=True)
class Tables:
    metadata: MetaData
    indexes: Table
    documents: Table
    chunks: Table
    versions: Table
    removals: Table
    dim: int  # of ``chunks``


def chunks_table(md: MetaData, name: str, dim: int, documents: Table) -> Table:
    # A sequence, not an identity column: identity columns on partitioned tables need PostgreSQL 17.
    ids = Sequence(f"{name}_id_seq", metadata=md)
    return Table(
        name, md,
        Column("id", BigInteger, ids, server_default=ids.next_value(), nullable=False),
        Column("index_name", Text, nullable=False),
        Column("doc_id", Text, nullable=False),
        Column("seq", Integer, nullable=False),
        Column("text", Text, nullable=False),
        Column("search_text", Text, nullable=False),  # the keyword side's text (contextual chunks differ)
        Column("metadata", JSONB, nullable=False),
        Column("embedding", Vector(dim), nullable=False),
        Column("added_in", BigInteger, nullable=False, server_default="0"),  # the index's change_seq of its write
        Column("tsv", TSVECTOR, Computed(f"to_tsvector('{TEXT_SEARCH_CONFIG}', search_text)", persisted=True)),
        PrimaryKeyConstraint("index_name", "id"),  # a partitioned table's keys hold its partition key
        ForeignKeyConstraint(["index_name", "doc_id"], [documents.c.index_name, documents.c.doc_id], ondelete="CASCADE"),
        postgresql_partition_by="LIST (index_name)",
    )


# The columns a write copies (binary COPY) into a leaf and into ``documents``, with their types; ``id``,
# ``tsv`` and ``pos`` are the database's.
CHUNK_COPY = {"index_name": "text", "doc_id": "text", "seq": "int4", "text": "text", "search_text": "text",
              "metadata": "jsonb", "embedding": "vector", "added_in": "int8"}
DOCUMENT_COPY = {"index_name": "text", "doc_id": "text", "text": "text", "metadata": "jsonb"}


def chunk_indexes(table: Table) -> list[Index]:
    """The secondary indexes of a chunks table, declared on the parent (so on every leaf): the 0001
    migration's names for ``chunks``. The vectors' HNSW index is per leaf (``hnsw_ddl``)."""
    prefix = "chunks" if table.name == "chunks" else table.name
    return [
        Index(f"{prefix}_doc", table.c.index_name, table.c.doc_id),
        Index(f"{prefix}_tsv", table.c.tsv, postgresql_using="gin"),
        Index(f"{prefix}_added", table.c.index_name, table.c.added_in),  # what a write added (keyword_mirror)
    ]


def leaf_name(parent: str, index_name: str) -> str:
    """The table holding index ``index_name``'s rows of ``parent`` (``chunks`` or ``chunks_d<dim>``): a digest
    of the name, since index names may hold any printable character and identifiers stop at 63 bytes."""
    return f"{parent}_{hashlib.sha256(index_name.encode()).hexdigest()[:16]}"


def hnsw_name(leaf: str) -> str:
    return f"{leaf}_hnsw"


def create_leaf(conn: Connection, parent: Table, index_name: str) -> str:
    """Create index ``index_name``'s table of ``parent`` when missing (its rows' partition, with the parent's
    indexes); returns its name. DDL takes no bound parameters, so the name is quoted by psycopg."""
    from psycopg import sql

    leaf = leaf_name(parent.name, index_name)
    raw = conn.connection.driver_connection
    assert raw is not None
    raw.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES IN ({})").format(
        sql.Identifier(parent.schema or "public", leaf), sql.Identifier(parent.schema or "public", parent.name),
        sql.Literal(index_name)))
    return leaf


def hnsw_ddl(schema: str, leaf: str, m: int, ef_construction: int, *, concurrently: bool = True) -> Any:
    """The HNSW (cosine) index of one leaf, built in one pass over its rows."""
    from psycopg import sql

    return sql.SQL("CREATE INDEX {} IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops) "
                   "WITH (m = {}, ef_construction = {})").format(
        sql.SQL("CONCURRENTLY" if concurrently else ""), sql.Identifier(hnsw_name(leaf)),
        sql.Identifier(schema, leaf), sql.Literal(int(m)), sql.Literal(int(ef_construction)))


def dim_chunks(t: Tables, dim: int) -> Table:
    """The chunks table of ``dim``-dimensional indexes: ``chunks`` for the schema's own dimension."""
    name = f"chunks_d{dim}"
    if t.dim == dim:
        return t.chunks
    found = t.metadata.tables.get(f"{t.metadata.schema}.{name}")
    return found if found is not None else chunks_table(t.metadata, name, dim, t.documents)


def tables(schema: str, dim: int) -> Tables:
    md = MetaData(schema=schema)
    indexes = Table(
        "indexes", md,
        Column("name", Text, primary_key=True),
        Column("config", JSONB, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("dim", Integer, nullable=True),  # NULL: the dimension of ``chunks``
        Column("doc_count", BigInteger, nullable=False, server_default="0"),
        Column("chunk_count", BigInteger, nullable=False, server_default="0"),
        Column("change_seq", BigInteger, nullable=False, server_default="0"),  # writes committed
        Column("pruned_through", BigInteger, nullable=False, server_default="0"),  # removals logged after it
    )
    documents = Table(
        "documents", md,
        Column("index_name", Text, ForeignKey(indexes.c.name, ondelete="CASCADE"), primary_key=True),
        Column("doc_id", Text, primary_key=True),
        Column("pos", BigInteger, Identity(), nullable=False),
        Column("text", Text, nullable=False),
        Column("metadata", JSONB, nullable=False),
    )
    chunks = chunks_table(md, "chunks", dim, documents)
    removals = Table(
        "chunk_removals", md,
        Column("index_name", Text, ForeignKey(indexes.c.name, ondelete="CASCADE"), primary_key=True),
        Column("change_seq", BigInteger, primary_key=True),
        Column("ids", ARRAY(BigInteger), nullable=False),
        Column("search_texts", ARRAY(Text), nullable=False),  # so a replica can take them out of its counts
        Column("removed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )
    versions = Table(
        "index_versions", md,
        Column("name", Text, primary_key=True),
        Column("book", JSONB, nullable=False),
        Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    )
    return Tables(md, indexes, documents, chunks, versions, removals, dim)
