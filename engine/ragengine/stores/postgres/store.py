"""``StoreAdapter`` over PostgreSQL + pgvector (see ``ragengine.stores.base`` for the contract).

Why not llama-index's ``PGVectorStore``: it owns a one-table layout without the documents' full text
(``GET /indexes/{name}/documents`` pages over documents), writes a document's chunks outside a
transaction shared with the document, has no schema migrations, and its metadata filters support
neither our list semantics nor type-aware ordering. So the adapter is ours, in SQLAlchemy Core over
psycopg, with the schema under alembic (``migrations/``).

- Dense: ``ORDER BY embedding <=> :q`` on an HNSW index (cosine). pgvector >= 0.8's iterative scans
  (``hnsw.iterative_scan``) keep a filtered search from returning fewer than k hits when the filter
  removes most of the index's first candidates; ``hnsw.ef_search`` comes from the settings.
- Keyword: PostgreSQL full-text search (``english`` configuration) over a generated ``tsvector``,
  the query's words OR-ed, ranked by ``ts_rank_cd`` over a bounded candidate set: at most
  ``keyword_candidates`` matching rows (GIN index, filter applied first) are ranked, so a query of
  common words costs the same on 10k chunks as on 1M (below the bound, results are unchanged).
  Each keyword hit also carries the cosine of its stored vector, so scores mean the same on every path and every backend.
- Writes: one transaction per API call, rows locked where a concurrent add could race.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import create_engine, delete, func, literal, literal_column, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from ragengine.retrieval.filters import Filter
from ragengine.stores.base import (
    ChunkWrite,
    DocumentRace,
    DocWrite,
    Hit,
    StoredDoc,
    StoreUnavailable,
    chunk_metadata,
    describe,
    split_chunk_metadata,
)
from ragengine.stores.postgres.filters import to_sql
from ragengine.stores.postgres.schema import TEXT_SEARCH_CONFIG, Tables, tables

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).parent / "migrations"
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TERMS = 64
# Matching rows ranked per keyword query at most. ts_rank_cd reads each row's tsvector, so ranking every
# match grows with the corpus (common words match most of it); a bound keeps the leg's cost flat.
KEYWORD_CANDIDATES = 2000


def sqlalchemy_url(url: str) -> str:
    """Accept the DSN forms users have (postgres://, postgresql://) and pick the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def keyword_query(query: str) -> str | None:
    """The query's distinct words OR-ed for ``to_tsquery`` (bound as a value; ``\\w+`` words hold none of
    tsquery's operators), or None when there is no word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_QUERY_TERMS]
    return " | ".join(words) if words else None


class PostgresStore:
    kind = "postgres"

    def __init__(self, url: str, *, schema: str, dim: int, hnsw_m: int = 16, ef_construction: int = 64,
                 ef_search: int = 100, pool_size: int = 8, keyword_candidates: int = KEYWORD_CANDIDATES) -> None:
        self.url = sqlalchemy_url(url)
        self.schema = schema
        self.dim = dim
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self.pool_size = pool_size
        self.keyword_candidates = keyword_candidates
        self.t: Tables = tables(schema, dim)
        self._engine: Engine | None = None
        self._ready = False

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = create_engine(self.url, pool_pre_ping=True, pool_size=self.pool_size, max_overflow=4,
                                         pool_timeout=10, connect_args={"connect_timeout": 5})
        return self._engine

    def open(self) -> None:
        with self._errors(), self.engine.begin() as conn:
            # One replica migrates at a time; the others wait here, then find the schema current.
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(literal(f"ragengine:{self.schema}")))))
            self._ensure_extension(conn)
            conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {self._quoted_schema(conn)}"))
            self._migrate(conn)
            self._check_dimension(conn)
        self._ready = True

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def ping(self) -> None:
        with self._errors(), self.engine.connect() as conn:
            conn.execute(select(self.t.indexes.c.name).limit(1))

    def _quoted_schema(self, conn: Connection) -> str:
        return conn.dialect.identifier_preparer.quote_schema(self.schema)

    def _ensure_extension(self, conn: Connection) -> None:
        have = conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first()
        if have:
            return
        try:
            with conn.begin_nested():
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        except DBAPIError as exc:
            raise StoreUnavailable(
                "the 'vector' extension (pgvector) is not installed in this database and could not be created "
                f"({describe(exc)}); install pgvector on the server and run CREATE EXTENSION vector as an owner"
            ) from exc

    def _migrate(self, conn: Connection) -> None:
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes.update(connection=conn, schema=self.schema, dim=self.dim, hnsw_m=self.hnsw_m,
                              ef_construction=self.ef_construction)
        command.upgrade(cfg, "head")

    def _check_dimension(self, conn: Connection) -> None:
        table = f"{self._quoted_schema(conn)}.chunks"
        have = conn.execute(text("SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(:t) "
                                 "AND attname = 'embedding'"), {"t": table}).scalar()
        if have is not None and have > 0 and have != self.dim:
            raise StoreUnavailable(
                f"dimension mismatch: schema '{self.schema}' stores {have}-dimensional vectors but the embedding "
                f"model makes {self.dim}-dimensional ones; use another vector_store_prefix or the model that "
                f"filled it")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (StoreUnavailable, DocumentRace):
            raise
        except IntegrityError:
            raise
        except SQLAlchemyError as exc:
            raise StoreUnavailable(describe(exc)) from exc

    # -- reads -------------------------------------------------------------------------------------
    def indexes(self) -> dict[str, dict]:
        with self._errors(), self.engine.connect() as conn:
            return {r.name: r.config for r in conn.execute(select(self.t.indexes.c.name, self.t.indexes.c.config))}

    def counts(self) -> dict[str, tuple[int, int]]:
        t = self.t
        with self._errors(), self.engine.connect() as conn:
            docs = {str(n): int(c) for n, c in conn.execute(
                select(t.documents.c.index_name, func.count()).group_by(t.documents.c.index_name))}
            chunks = {str(n): int(c) for n, c in conn.execute(
                select(t.chunks.c.index_name, func.count()).group_by(t.chunks.c.index_name))}
            names = conn.execute(select(t.indexes.c.name)).scalars().all()
        return {n: (int(docs.get(n, 0)), int(chunks.get(n, 0))) for n in names}

    def get_documents(self, name: str, doc_ids: list[str]) -> dict[str, StoredDoc]:
        if not doc_ids:
            return {}
        d = self.t.documents
        with self._errors(), self.engine.connect() as conn:
            rows = conn.execute(select(d.c.doc_id, d.c.text, d.c.metadata)
                                .where(d.c.index_name == name, d.c.doc_id.in_(doc_ids)))
            return {r.doc_id: StoredDoc(r.doc_id, r.text, r.metadata) for r in rows}

    def chunk_vectors(self, name: str, doc_id: str) -> tuple[list[ChunkWrite], np.ndarray]:
        c = self.t.chunks
        with self._errors(), self.engine.connect() as conn:
            rows = conn.execute(select(c.c.seq, c.c.text, c.c.search_text, c.c.metadata, c.c.embedding)
                                .where(c.c.index_name == name, c.c.doc_id == doc_id).order_by(c.c.seq)).all()
        vectors = np.array([np.asarray(r.embedding, dtype=np.float32) for r in rows], dtype=np.float32)
        chunks = [ChunkWrite(r.seq, r.text, r.search_text, split_chunk_metadata(r.metadata)[1]) for r in rows]
        return chunks, vectors.reshape(len(rows), self.dim)

    def list_documents(self, name: str, flt: Filter | None, offset: int, limit: int) -> tuple[list[StoredDoc], int]:
        d = self.t.documents
        where = [d.c.index_name == name]
        if flt is not None:
            where.append(to_sql(flt, d.c.metadata))
        with self._errors(), self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(d).where(*where)).scalar_one()
            rows = conn.execute(select(d.c.doc_id, d.c.text, d.c.metadata).where(*where)
                                .order_by(d.c.pos).offset(offset).limit(limit))
            return [StoredDoc(r.doc_id, r.text, r.metadata) for r in rows], int(total)

    def dense(self, name: str, query: np.ndarray, k: int, flt: Filter | None) -> list[Hit]:
        c = self.t.chunks
        distance = c.c.embedding.cosine_distance(np.asarray(query, dtype=np.float32))
        where = [c.c.index_name == name]
        if flt is not None:
            where.append(to_sql(flt, c.c.metadata))
        stmt = (select(c.c.doc_id, c.c.seq, c.c.text, c.c.metadata, distance.label("distance"))
                .where(*where).order_by(distance).limit(k))
        with self._errors(), self.engine.begin() as conn:
            conn.execute(select(func.set_config("hnsw.ef_search", str(max(self.ef_search, k)), True)))
            conn.execute(select(func.set_config("hnsw.iterative_scan", "relaxed_order", True)))
            rows = conn.execute(stmt).all()
        hits = [_hit(r.doc_id, r.seq, r.text, r.metadata, 1.0 - float(r.distance)) for r in rows]
        hits.sort(key=lambda h: -h.cosine)  # relaxed_order may return a near-sorted list
        return hits

    def keyword(self, name: str, query: str, query_vector: np.ndarray, k: int, flt: Filter | None) -> list[Hit]:
        terms = keyword_query(query)
        if terms is None:
            return []
        c = self.t.chunks
        tsquery = func.to_tsquery(literal_column(f"'{TEXT_SEARCH_CONFIG}'::regconfig"), literal(terms))
        distance = c.c.embedding.cosine_distance(np.asarray(query_vector, dtype=np.float32))
        where = [c.c.index_name == name, c.c.tsv.op("@@")(tsquery)]
        if flt is not None:
            where.append(to_sql(flt, c.c.metadata))
        # A bounded candidate set (GIN index, filter included), ranked in a subquery, then the cosine for
        # the k winners only (not for every matching chunk).
        cand = select(c.c.id, c.c.tsv).where(*where).limit(max(self.keyword_candidates, k)).subquery("cand")
        rank = func.ts_rank_cd(cand.c.tsv, tsquery)
        top = select(cand.c.id, rank.label("rank")).order_by(rank.desc(), cand.c.id).limit(k).subquery()
        stmt = (select(c.c.doc_id, c.c.seq, c.c.text, c.c.metadata, top.c.rank, distance.label("distance"))
                .join(top, c.c.id == top.c.id).order_by(top.c.rank.desc(), c.c.id))
        with self._errors(), self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [_hit(r.doc_id, r.seq, r.text, r.metadata, 1.0 - float(r.distance), float(r.rank)) for r in rows]

    # -- writes ------------------------------------------------------------------------------------
    def drop_index(self, name: str) -> bool:
        with self._errors(), self.engine.begin() as conn:
            return conn.execute(delete(self.t.indexes).where(self.t.indexes.c.name == name)).rowcount > 0

    def write(self, name: str, config: dict, delete_ids: list[str], add: list[DocWrite], vectors: np.ndarray | None,
              *, add_only: bool) -> None:
        try:
            self._write(name, config, delete_ids, add, vectors, add_only=add_only)
        except IntegrityError:
            # Two replicas inserted the same new document at once; the retry sees the committed one.
            self._write(name, config, delete_ids, add, vectors, add_only=add_only)

    def _write(self, name: str, config: dict, delete_ids: list[str], add: list[DocWrite], vectors: np.ndarray | None,
               *, add_only: bool) -> None:
        t = self.t
        with self._errors(), self.engine.begin() as conn:
            conn.execute(pg_insert(t.indexes).values(name=name, config=config).on_conflict_do_nothing())
            if delete_ids:
                conn.execute(delete(t.documents).where(t.documents.c.index_name == name,
                                                       t.documents.c.doc_id.in_(delete_ids)))
            if not add:
                return
            skip: set[str] = set()
            if add_only:
                held = conn.execute(select(t.documents.c.doc_id, t.documents.c.text)
                                    .where(t.documents.c.index_name == name,
                                           t.documents.c.doc_id.in_([d.doc_id for d in add])).with_for_update()).all()
                wanted = {d.doc_id: d.text for d in add}
                for row in held:
                    if row.text != wanted[row.doc_id]:
                        raise DocumentRace(row.doc_id)
                    skip.add(row.doc_id)
            doc_rows, chunk_rows, pos = [], [], 0
            for doc in add:
                n = len(doc.chunks)
                if doc.doc_id not in skip:
                    doc_rows.append({"index_name": name, "doc_id": doc.doc_id, "text": doc.text, "metadata": doc.metadata})
                    for i, chunk in enumerate(doc.chunks):
                        chunk_rows.append({"index_name": name, "doc_id": doc.doc_id, "seq": chunk.seq, "text": chunk.text,
                                           "search_text": chunk.indexed_text,
                                           "metadata": chunk_metadata(doc.metadata, chunk.tokens),
                                           "embedding": _vector(vectors, pos + i)})
                pos += n
            if doc_rows:
                conn.execute(t.documents.insert(), doc_rows)
            if chunk_rows:
                conn.execute(t.chunks.insert(), chunk_rows)


def _hit(doc_id: str, seq: int, text: str, metadata: dict, cosine: float, keyword_score: float | None = None) -> Hit:
    doc_metadata, tokens = split_chunk_metadata(metadata)
    return Hit(doc_id, seq, text, doc_metadata, cosine, keyword_score, tokens)


def _vector(vectors: np.ndarray | None, i: int) -> Any:
    if vectors is None or i >= len(vectors):
        raise ValueError("write() got fewer vectors than chunks")
    return np.asarray(vectors[i], dtype=np.float32)
