"""A write's rows, and the binary ``COPY`` that puts them in (``PostgresStore.write`` holds the transaction).

- ``rows_to_copy``: the document and chunk rows of the documents to add, in the column order of
  ``schema.DOCUMENT_COPY`` / ``CHUNK_COPY``, each chunk stamped with the write's ``change_seq``;
  an add-only write skips the documents already held with the same text and refuses those held with
  other text (``DocumentRace``), under row locks;
- ``copy_rows``: binary ``COPY`` of rows into a table, vectors as float32 bytes (about 20,000 chunks/s
  here, against 336/s for ``INSERT ... executemany`` with an HNSW index kept up row by row);
- ``only``: the documents of a write that are kept, with their rows of the vectors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from sqlalchemy import Table, Text, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection

from ragengine.stores.base import DocumentRace, DocWrite, chunk_metadata
from ragengine.stores.postgres.connection import driver


def rows_to_copy(conn: Connection, documents: Table, name: str, add: list[DocWrite], vectors: np.ndarray | None, *,
                 add_only: bool, change: int) -> tuple[list[tuple], list[tuple]]:
    """The document and chunk rows to copy into index ``name`` for ``add`` (``vectors``: one row per chunk,
    in order)."""
    if not add:
        return [], []
    skip: set[str] = set()
    if add_only:
        ids = bindparam("ids", [d.doc_id for d in add], type_=ARRAY(Text))  # one array, not an IN list
        held = conn.execute(select(documents.c.doc_id, documents.c.text)
                            .where(documents.c.index_name == name, documents.c.doc_id == func.any(ids))
                            .with_for_update()).all()
        wanted = {d.doc_id: d.text for d in add}
        for row in held:
            if row.text != wanted[row.doc_id]:
                raise DocumentRace(row.doc_id)
            skip.add(row.doc_id)
    doc_rows, chunk_rows, pos = [], [], 0
    for doc in add:
        n = len(doc.chunks)
        if doc.doc_id not in skip:
            doc_rows.append((name, doc.doc_id, doc.text, doc.metadata))
            for i, chunk in enumerate(doc.chunks):
                chunk_rows.append((name, doc.doc_id, chunk.seq, chunk.text, chunk.indexed_text,
                                   chunk_metadata(doc.metadata, chunk.tokens, chunk.place), _vector(vectors, pos + i), change))
        pos += n
    return doc_rows, chunk_rows


def copy_rows(conn: Connection, schema: str, table: str, columns: dict[str, str], rows: list[tuple]) -> None:
    """Binary COPY of ``rows`` (``columns``: name -> type) into ``schema.table``: no statement text per row.
    A duplicate key raises psycopg's IntegrityError, as an INSERT would."""
    raw = driver(conn)
    if raw.adapters.types.get("vector") is None:
        from pgvector.psycopg.vector import register_vector_info

        register_vector_info(raw, psycopg.types.TypeInfo.fetch(raw, "vector"))
    stmt = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(
        sql.Identifier(schema, table), sql.SQL(", ").join(map(sql.Identifier, columns)))
    with raw.cursor() as cur, cur.copy(stmt) as copy:
        copy.set_types(list(columns.values()))
        for row in rows:
            copy.write_row(row)


def only(add: list[DocWrite], vectors: np.ndarray | None, keep: set[str]) -> tuple[list[DocWrite], np.ndarray | None]:
    """The documents of ``add`` in ``keep``, with their rows of ``vectors``."""
    rows: list[int] = []
    out: list[DocWrite] = []
    pos = 0
    for doc in add:
        n = len(doc.chunks)
        if doc.doc_id in keep:
            out.append(doc)
            rows.extend(range(pos, pos + n))
        pos += n
    return out, (vectors[rows] if vectors is not None and rows else None)


def _vector(vectors: np.ndarray | None, i: int) -> Any:
    if vectors is None or i >= len(vectors):
        raise ValueError("write() got fewer vectors than chunks")
    return np.asarray(vectors[i], dtype=np.float32)
