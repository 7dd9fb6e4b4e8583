"""``StoreAdapter`` over PostgreSQL + pgvector (see ``ragengine.stores.base`` for the contract).

Why not llama-index's ``PGVectorStore``: it owns a one-table layout without the documents' full text
(``GET /indexes/{name}/documents`` pages over documents), writes a document's chunks outside a
transaction shared with the document, has no schema migrations, and its metadata filters support
neither our list semantics nor type-aware ordering. So the adapter is ours, in SQLAlchemy Core over
psycopg, with the schema under alembic (``migrations/``).

- Each index's chunks are a table of their own (a partition of ``chunks``, ``schema.leaf_name``).
- Dense: ``ORDER BY embedding <=> :q``. An index of at most ``hnsw_threshold`` chunks is searched exactly
  (a scan of its own table: 20 ms at 10,000 chunks here); a larger one gets an HNSW index (cosine) of its
  own, built in one pass once its writes pause (``maintain``, run by the registry in the background) or at
  once after a bulk load (``build_hnsw``), never row by row during the load. Until it exists searches stay
  exact. pgvector >= 0.8's iterative scans (``hnsw.iterative_scan``) keep a filtered search from returning
  fewer than k hits when the filter removes most of the first candidates; ``hnsw.ef_search`` comes from
  the settings.
- Keyword: unfiltered searches are answered from this replica's own BM25 index of the index
  (``keyword_mirror``: the embedded store's BM25, kept in step with every replica's writes through a change
  log, 10 ms p50 at a million chunks). Filtered searches, and an index whose mirror is still loading, use
  PostgreSQL full-text search (``english`` configuration) over a generated ``tsvector``, ranked by
  ``ts_rank_cd`` over a bounded candidate set, rarest words first (``keyword_leg``): every match of the
  words whose matches fit in ``keyword_candidates`` (2,000), then chunks holding every common word. Each
  keyword hit also carries the cosine of its stored vector, so scores mean the same on every path and
  every backend.
- Writes: one transaction per API call, rows locked where a concurrent add could race; each write keeps
  its index's document and chunk counts in the index's row (``counts`` scans nothing) and logs what it
  changed for the replicas' keyword mirrors. The chunks go in by
  binary ``COPY`` into the index's table (about 20,000 chunks/s here with their vectors; row-by-row HNSW
  upkeep was 320/s), in the same transaction as their documents, so a 200 still means committed.
- Dimensions: ``chunks`` has the dimension of the model that made the schema; an index whose vectors have
  another (a version built with another model, docs/versions.md) keeps its chunks in ``chunks_d<dim>``,
  created with its HNSW index on first use. A store made for another model therefore opens as it is.

Longer than 400 lines on purpose: one class is the whole ``StoreAdapter`` contract over one database (its methods
share the engine, the table cache and the transaction helpers); the schema, the migrations, the keyword leg and
mirror, and the filters' SQL are their own modules already.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psycopg
from psycopg import sql
from sqlalchemy import (
    BigInteger,
    Table,
    Text,
    bindparam,
    cast,
    create_engine,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from ragengine.formats import NewerFormat, check_schema
from ragengine.index.documents import DocSearch
from ragengine.retrieval.filters import Filter
from ragengine.stores.base import (
    ChunkWrite,
    DocWrite,
    Hit,
    NoSuchIndex,
    StoredDoc,
    StoreUnavailable,
    describe,
    split_chunk_metadata,
)
from ragengine.stores.postgres import keyword_leg
from ragengine.stores.postgres.connection import driver, store_errors
from ragengine.stores.postgres.filters import to_sql
from ragengine.stores.postgres.hnsw import HNSW_THRESHOLD, HnswUpkeep
from ragengine.stores.postgres.keyword import keyword_words
from ragengine.stores.postgres.keyword_mirror import KeywordMirrors
from ragengine.stores.postgres.schema import (
    CHUNK_COPY,
    DOCUMENT_COPY,
    Tables,
    chunk_indexes,
    create_leaf,
    dim_chunks,
    leaf_name,
    tables,
)
from ragengine.stores.postgres.word_stats import WordStats
from ragengine.stores.postgres.write_rows import copy_rows, only, rows_to_copy

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).parent / "migrations"
# Matching rows ranked per keyword query at most. ts_rank_cd reads each row's tsvector, so ranking every
# match grows with the corpus (common words match most of it); a bound keeps the leg's cost flat.
KEYWORD_CANDIDATES = 2000
PRUNE_EVERY_S = 60.0  # how often the upkeep prunes the removal log (keyword_mirror)


def sqlalchemy_url(url: str) -> str:
    """Accept the DSN forms users have (postgres://, postgresql://) and pick the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def schema_label(schema: str) -> str:
    return f"the PostgreSQL store's schema {schema!r}"


class PostgresStore:
    kind = "postgres"

    def __init__(self, url: str, *, schema: str, dim: int, hnsw_m: int = 16, ef_construction: int = 64,
                 ef_search: int = 100, pool_size: int = 8, keyword_candidates: int = KEYWORD_CANDIDATES,
                 keyword_list_factor: int = 4, hnsw_threshold: int = HNSW_THRESHOLD,
                 build_memory_mb: int = 1024, keyword_index: Literal["memory", "database"] = "memory") -> None:
        self.url = sqlalchemy_url(url)
        self.schema = schema
        self.dim = dim
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self.pool_size = pool_size
        self.keyword_candidates = keyword_candidates
        self.keyword_list_factor = keyword_list_factor
        self.words = WordStats(schema)
        self.hnsw = HnswUpkeep(lambda: self.engine, schema, m=hnsw_m, ef_construction=ef_construction,
                               threshold=hnsw_threshold, build_memory_mb=build_memory_mb, analyzed=self.words.forget)
        self.t: Tables = tables(schema, dim)
        self._engine: Engine | None = None
        self._ready = False
        self._made: set[int] = set()  # dimensions whose chunks_d<dim> table this process knows exists
        # "memory": unfiltered keyword searches from this replica's BM25 mirror of each index (keyword_mirror);
        # "database": always the SQL leg (no memory per chunk in the engine).
        self.mirrors = KeywordMirrors(lambda: self.engine, lambda: self.t) if keyword_index == "memory" else None
        self._pruned_at = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        if self._engine is None:
            # prepare_threshold None: never a server-side prepared statement, so every query is planned with
            # its index name and reads only that index's table (a generic plan would plan them all).
            self._engine = create_engine(self.url, pool_pre_ping=True, pool_size=self.pool_size, max_overflow=4,
                                         pool_timeout=10, connect_args={"connect_timeout": 5, "prepare_threshold": None})
        return self._engine

    def open(self) -> None:
        with store_errors(), self.engine.begin() as conn:
            # One replica migrates at a time; the others wait here, then find the schema current.
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(literal(f"ragengine:{self.schema}")))))
            if not self._schema_known(conn):
                return
            self._ensure_extension(conn)
            conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {self._quoted_schema(conn)}"))
            self._migrate(conn)
            self._adopt_dimension(conn)
        self._ready = True

    def close(self) -> None:
        if self._engine is not None:
            with contextlib.suppress(StoreUnavailable):  # a build can take minutes; the next start builds again
                self.hnsw.cancel()
            if self.mirrors is not None:
                self.mirrors.close()
            self._engine.dispose()

    def ping(self) -> None:
        with store_errors(), self.engine.connect() as conn:
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

    def _schema_known(self, conn: Connection) -> bool:
        """Whether these migrations know the schema's revision (its version marker; a new schema: yes). One they do
        not know was migrated by a newer engine: refused (``FormatRefused``, nothing run) at the first open, so an
        older engine does not start on it. At a re-open (after an outage) of a schema this process has served, a
        newer replica migrated it meanwhile (a rolling upgrade): migrations are additive (docs/formats.md), so this
        replica keeps serving on it, and leaves it as it is, until it is replaced."""
        try:
            check_schema(conn, schema_label(self.schema), MIGRATIONS, schema=self.schema)
        except NewerFormat as exc:
            if not self._ready:
                raise
            log.warning("%s; this replica keeps serving on it until it is replaced, and would refuse to start on it", exc)
            return False
        return True

    def _migrate(self, conn: Connection) -> None:
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes.update(connection=conn, schema=self.schema, dim=self.dim, hnsw_m=self.hnsw_m,
                              ef_construction=self.ef_construction)
        command.upgrade(cfg, "head")

    def _adopt_dimension(self, conn: Connection) -> None:
        """``chunks`` keeps the dimension it was made with: a schema filled by another model opens as it is
        (its indexes keep serving with their model; new dimensions get their own table)."""
        table = f"{self._quoted_schema(conn)}.chunks"
        have = conn.execute(text("SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(:t) "
                                 "AND attname = 'embedding'"), {"t": table}).scalar()
        if have is not None and have > 0 and have != self.t.dim:
            self.t = tables(self.schema, int(have))
            self._made.clear()

    @property
    def base_dim(self) -> int:
        return self.t.dim

    def _table(self, conn: Connection, dim: int | None, *, create: bool = False) -> Table:
        """The chunks table of ``dim`` (None or the base dimension: ``chunks``); a write creates it when missing
        (an index of that dimension exists only once its row is committed with that table)."""
        if dim is None or dim == self.base_dim:
            return self.t.chunks
        table = dim_chunks(self.t, dim)
        if create and dim not in self._made:
            with conn.begin_nested():
                conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(literal(f"ragengine:{self.schema}")))))
                table.create(conn, checkfirst=True)
                for index in chunk_indexes(table):
                    index.create(conn, checkfirst=True)
            self._made.add(dim)
        return table

    def _dim(self, conn: Connection, name: str) -> int | None:
        # Asked every time (a primary-key lookup): an index dropped and made again elsewhere may have another.
        return conn.execute(select(self.t.indexes.c.dim).where(self.t.indexes.c.name == name)).scalar()

    def _chunks_of(self, conn: Connection, name: str, *, create: bool = False) -> Table:
        return self._table(conn, self._dim(conn, name), create=create)

    def _searched(self, conn: Connection, name: str) -> Table:
        """The chunks table of an index being searched; NoSuchIndex when it does not exist."""
        row = conn.execute(select(self.t.indexes.c.dim).where(self.t.indexes.c.name == name)).first()
        if row is None:
            raise NoSuchIndex(name)
        return self._table(conn, row.dim)

    # -- reads -------------------------------------------------------------------------------------
    def indexes(self) -> dict[str, dict]:
        with store_errors(), self.engine.connect() as conn:
            return {r.name: r.config for r in conn.execute(select(self.t.indexes.c.name, self.t.indexes.c.config))}

    def dim_of(self, name: str) -> int | None:
        """The dimension of index ``name``'s vectors (None: no such index)."""
        with store_errors(), self.engine.connect() as conn:
            row = conn.execute(select(self.t.indexes.c.dim).where(self.t.indexes.c.name == name)).first()
        return None if row is None else (row.dim or self.base_dim)

    def counts(self) -> dict[str, tuple[int, int]]:
        """(documents, chunks) per index: kept in each index's row by its writes, so reading them scans nothing."""
        i = self.t.indexes
        with store_errors(), self.engine.connect() as conn:
            return {r.name: (int(r.doc_count), int(r.chunk_count))
                    for r in conn.execute(select(i.c.name, i.c.doc_count, i.c.chunk_count))}

    def get_documents(self, name: str, doc_ids: list[str]) -> dict[str, StoredDoc]:
        if not doc_ids:
            return {}
        d = self.t.documents
        with store_errors(), self.engine.connect() as conn:
            rows = conn.execute(select(d.c.doc_id, d.c.text, d.c.metadata)
                                .where(d.c.index_name == name, d.c.doc_id.in_(doc_ids)))
            return {r.doc_id: StoredDoc(r.doc_id, r.text, r.metadata) for r in rows}

    def chunk_vectors(self, name: str, doc_id: str) -> tuple[list[ChunkWrite], np.ndarray]:
        return self.chunks_of(name, [doc_id]).get(doc_id) or ([], np.zeros((0, self.dim), np.float32))

    def chunks_of(self, name: str, doc_ids: list[str]) -> dict[str, tuple[list[ChunkWrite], np.ndarray]]:
        """Per document: its chunks in order and their stored vectors (exports, metadata-only updates)."""
        if not doc_ids:
            return {}
        with store_errors(), self.engine.connect() as conn:
            c = self._chunks_of(conn, name)
            rows = conn.execute(select(c.c.doc_id, c.c.seq, c.c.text, c.c.search_text, c.c.metadata, c.c.embedding)
                                .where(c.c.index_name == name, c.c.doc_id.in_(doc_ids))
                                .order_by(c.c.doc_id, c.c.seq)).all()
        out: dict[str, tuple[list[ChunkWrite], list[np.ndarray]]] = {}
        for r in rows:
            chunks, vectors = out.setdefault(r.doc_id, ([], []))
            _, tokens, place = split_chunk_metadata(r.metadata)
            chunks.append(ChunkWrite(r.seq, r.text, r.search_text, tokens, place))
            vectors.append(np.asarray(r.embedding, dtype=np.float32))
        return {d: (chunks, np.array(vectors, dtype=np.float32)) for d, (chunks, vectors) in out.items()}

    def digests(self, name: str) -> dict[str, str]:
        """doc_id -> md5 of the document's text and metadata (jsonb's text form is canonical)."""
        d = self.t.documents
        digest = func.concat(func.md5(d.c.text), func.md5(cast(d.c.metadata, Text)))
        with store_errors(), self.engine.connect() as conn:
            return {r.doc_id: r.digest for r in conn.execute(
                select(d.c.doc_id, digest.label("digest")).where(d.c.index_name == name))}

    def list_documents(self, name: str, flt: Filter | None, offset: int, limit: int,
                       search: DocSearch | None = None) -> tuple[list[StoredDoc], int]:
        d = self.t.documents
        where = [d.c.index_name == name]
        if flt is not None:
            where.append(to_sql(flt, d.c.metadata))
        if search is not None and search.doc_id is not None:
            where.append(d.c.doc_id == search.doc_id)
        if search is not None and search.text is not None:
            # strpos, not LIKE: the needle is a bound value, and its % and _ mean themselves
            needle = search.needle
            where.append(or_(func.strpos(func.lower(d.c.doc_id), needle) > 0, func.strpos(func.lower(d.c.text), needle) > 0))
        with store_errors(), self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(d).where(*where)).scalar_one()
            rows = conn.execute(select(d.c.doc_id, d.c.text, d.c.metadata).where(*where)
                                .order_by(d.c.pos).offset(offset).limit(limit))
            return [StoredDoc(r.doc_id, r.text, r.metadata) for r in rows], int(total)

    def dense(self, name: str, query: np.ndarray, k: int, flt: Filter | None) -> list[Hit]:
        i = self.t.indexes
        with store_errors(), self.engine.begin() as conn:
            # One round trip before the search: the index's dimension, and the HNSW settings for this transaction.
            row = conn.execute(select(i.c.dim, func.set_config("hnsw.ef_search", str(max(self.ef_search, k)), True),
                                      func.set_config("hnsw.iterative_scan", "relaxed_order", True))
                               .where(i.c.name == name)).first()
            if row is None:
                raise NoSuchIndex(name)
            c = self._table(conn, row.dim)
            distance = c.c.embedding.cosine_distance(np.asarray(query, dtype=np.float32))
            where = [c.c.index_name == name]
            if flt is not None:
                where.append(to_sql(flt, c.c.metadata))
            stmt = (select(c.c.doc_id, c.c.seq, c.c.text, c.c.metadata, distance.label("distance"))
                    .where(*where).order_by(distance).limit(k))
            rows = conn.execute(stmt).all()
        hits = [_hit(r.doc_id, r.seq, r.text, r.metadata, 1.0 - float(r.distance)) for r in rows]
        hits.sort(key=lambda h: -h.cosine)  # relaxed_order may return a near-sorted list
        return hits

    def keyword(self, name: str, query: str, query_vector: np.ndarray, k: int, flt: Filter | None) -> list[Hit]:
        if flt is None and self.mirrors is not None:
            hits = self._keyword_in_memory(name, query, query_vector, k)
            if hits is not None:
                return hits
        words = keyword_words(query)
        if not words:
            return []
        bound = max(self.keyword_candidates, k)
        listed = bound * self.keyword_list_factor  # a scored word's matches, listed in full, at most
        with store_errors(), self.engine.connect() as conn:
            found = keyword_leg.search(conn, self._searched(conn, name), name, words, query_vector, k, flt,
                                       bound=bound, listed=listed, stats=self.words)
        return [_hit(r.doc_id, r.seq, r.text, r.metadata, 1.0 - float(r.distance), float(r.rank)) for r in found]

    def _keyword_in_memory(self, name: str, query: str, query_vector: np.ndarray, k: int) -> list[Hit] | None:
        """The keyword leg from this replica's BM25 index of ``name`` (``keyword_mirror``), caught up with every
        committed write first; None while it loads (the SQL leg answers)."""
        assert self.mirrors is not None
        i = self.t.indexes
        with store_errors(), self.engine.connect() as conn:
            # One round trip before the search: the dimension and what the mirror needs to know it is current.
            row = conn.execute(select(i.c.dim, i.c.change_seq, i.c.pruned_through, i.c.created_at, i.c.chunk_count)
                               .where(i.c.name == name)).first()
            if row is None:
                self.mirrors.forget(name)
                raise NoSuchIndex(name)
            c = self._table(conn, row.dim)
            found = self.mirrors.search(name, row, c, query, k)
            if found is None:
                return None
            ids, scores = found
            if not ids:
                return []
            distance = c.c.embedding.cosine_distance(np.asarray(query_vector, dtype=np.float32))
            rows = {r.id: r for r in conn.execute(
                select(c.c.id, c.c.doc_id, c.c.seq, c.c.text, c.c.metadata, distance.label("distance"))
                .where(c.c.index_name == name, c.c.id == func.any(bindparam("ids", ids, type_=ARRAY(BigInteger)))))}
        # A chunk removed since the catch-up is left out (the next search's catch-up takes it out).
        return [_hit(r.doc_id, r.seq, r.text, r.metadata, 1.0 - float(r.distance), score)
                for i, score in zip(ids, scores, strict=True) if (r := rows.get(i)) is not None]

    def warm_keyword(self, name: str) -> bool:
        """Load (or catch up) this replica's in-memory keyword index of ``name`` now, instead of on its first
        search; False when there is no such index or keyword search stays in SQL."""
        if self.mirrors is None:
            return False
        with store_errors(), self.engine.connect() as conn:
            c = self._chunks_of(conn, name)
        with store_errors():
            return self.mirrors.load(name, c)

    # -- writes ------------------------------------------------------------------------------------
    def drop_index(self, name: str) -> bool:
        """Drop the index's table (instant at any size), then its row (its documents go with it)."""
        if self.mirrors is not None:
            self.mirrors.forget(name)
        with store_errors(), self.engine.begin() as conn:
            leaf = leaf_name(self._chunks_of(conn, name).name, name)
            self.hnsw.stop_builds(conn, leaf)
            driver(conn).execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.schema, leaf)))
            return conn.execute(delete(self.t.indexes).where(self.t.indexes.c.name == name)).rowcount > 0

    def _ensure_leaf(self, name: str, dim: int | None) -> Table:
        """Create index ``name``'s table before its write, in a transaction of its own: creating a partition
        locks the parent table, and held for a whole write that would stall every other index's reads.
        Returns the parent."""
        with store_errors(), self.engine.begin() as conn:
            row = conn.execute(select(self.t.indexes.c.dim).where(self.t.indexes.c.name == name)).first()
            parent = self._table(conn, row.dim if row is not None else dim, create=True)
            leaf = leaf_name(parent.name, name)
            if conn.execute(select(func.to_regclass(literal(f'"{self.schema}"."{leaf}"')))).scalar() is None:
                conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(literal(f"ragengine:{self.schema}")))))
                create_leaf(conn, parent, name)
        return parent

    def write(self, name: str, config: dict, delete_ids: list[str], add: list[DocWrite], vectors: np.ndarray | None,
              *, add_only: bool, dim: int | None = None, source: str | None = None) -> None:
        """``dim``: the dimension of a new index's vectors (default: ``chunks``'). ``source``: write only the
        documents that index ``source`` still holds with the same text and metadata (a version being built
        from it must never get an older copy over a newer write; checked under row locks)."""
        try:
            self._write(name, config, delete_ids, add, vectors, add_only=add_only, dim=dim, source=source)
        except (IntegrityError, psycopg.errors.IntegrityError):
            # Two replicas inserted the same new document at once; the retry sees the committed one.
            self._write(name, config, delete_ids, add, vectors, add_only=add_only, dim=dim, source=source)

    def _write(self, name: str, config: dict, delete_ids: list[str], add: list[DocWrite], vectors: np.ndarray | None,
               *, add_only: bool, dim: int | None = None, source: str | None = None) -> None:
        t = self.t
        own = None if dim is None or dim == self.base_dim else dim
        parent = self._ensure_leaf(name, own)
        with store_errors(), self.engine.begin() as conn:
            # The parent table before anything else. Making or dropping an index's table locks the parent and
            # then ``documents`` (the foreign key); a write that held ``documents`` when its COPY reached the
            # parent (to check the partition) would deadlock with them. ONLY: not every index's table.
            driver(conn).execute(sql.SQL("LOCK TABLE ONLY {} IN ACCESS SHARE MODE").format(
                sql.Identifier(self.schema, parent.name)))
            conn.execute(pg_insert(t.indexes).values(name=name, config=config, dim=own).on_conflict_do_nothing())
            leaf = leaf_name(self._chunks_of(conn, name, create=True).name, name)
            # The index's table first, then its row: the order drop_index takes them in (no deadlock).
            driver(conn).execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(
                sql.Identifier(self.schema, leaf)))
            if source is not None:
                current = {r.doc_id: (r.text, r.metadata) for r in conn.execute(
                    select(t.documents.c.doc_id, t.documents.c.text, t.documents.c.metadata)
                    .where(t.documents.c.index_name == source, t.documents.c.doc_id.in_([d.doc_id for d in add]))
                    .with_for_update(read=True))}
                keep = {d.doc_id for d in add if current.get(d.doc_id) == (d.text, d.metadata)}
                add, vectors = only(add, vectors, keep)
                delete_ids = [d for d in delete_ids if d in keep]
            # The index's row next: its lock orders this index's writes, whose number stamps the chunks
            # (keyword_mirror reads them in that order).
            change = conn.execute(update(t.indexes).where(t.indexes.c.name == name)
                                  .values(change_seq=t.indexes.c.change_seq + 1)
                                  .returning(t.indexes.c.change_seq)).scalar_one()
            c = self._chunks_of(conn, name)
            removed: list[Any] = []
            docs_removed = 0
            if delete_ids:
                removed = list(conn.execute(delete(c).where(c.c.index_name == name, c.c.doc_id.in_(delete_ids))
                                            .returning(c.c.id, c.c.search_text)).all())
                docs_removed = conn.execute(delete(t.documents).where(t.documents.c.index_name == name,
                                                                      t.documents.c.doc_id.in_(delete_ids))).rowcount
            doc_rows, chunk_rows = rows_to_copy(conn, t.documents, name, add, vectors, add_only=add_only, change=change)
            if doc_rows:
                copy_rows(conn, self.schema, "documents", DOCUMENT_COPY, doc_rows)
            if chunk_rows:
                copy_rows(conn, self.schema, leaf, CHUNK_COPY, chunk_rows)
            if removed:
                conn.execute(insert(t.removals).values(index_name=name, change_seq=change,
                                                       ids=[r.id for r in removed],
                                                       search_texts=[r.search_text for r in removed]))
            conn.execute(update(t.indexes).where(t.indexes.c.name == name).values(
                doc_count=t.indexes.c.doc_count + (len(doc_rows) - docs_removed),
                chunk_count=t.indexes.c.chunk_count + (len(chunk_rows) - len(removed))))

    # -- HNSW upkeep (ragengine.stores.postgres.hnsw) ---------------------------------------------------
    def maintain(self, quiet_s: float = 10.0) -> list[str]:
        """Build the HNSW index of each index over the threshold whose writes have paused for ``quiet_s``
        (run by the registry in the background); returns the tables built. Also forgets the keyword mirrors
        of indexes dropped elsewhere and, once a minute, prunes the removal log (``keyword_mirror``)."""
        if self.mirrors is not None:
            self.mirrors.keep_only(set(self.indexes()))
            if time.monotonic() - self._pruned_at > PRUNE_EVERY_S:
                with store_errors():
                    self.mirrors.prune()
                self._pruned_at = time.monotonic()
        return self.hnsw.maintain(quiet_s)

    def build_hnsw(self, name: str) -> bool:
        """Finish a bulk load of index ``name`` now: its statistics and visibility map (VACUUM ANALYZE), and its
        HNSW index if it holds over the threshold's chunks. True when the HNSW index was built (or already there)."""
        with store_errors(), self.engine.connect() as conn:
            c = self._chunks_of(conn, name)
            count = conn.execute(select(self.t.indexes.c.chunk_count).where(self.t.indexes.c.name == name)).scalar()
        return self.hnsw.finish_load(leaf_name(c.name, name), int(count or 0))

    # -- version books (ragengine.versions) ---------------------------------------------------------
    def books(self) -> dict[str, dict]:
        v = self.t.versions
        with store_errors(), self.engine.connect() as conn:
            return {r.name: r.book for r in conn.execute(select(v.c.name, v.c.book))}

    def book_update(self, name: str, change: Callable[[dict | None], dict | None]) -> dict | None:
        """Read-modify-write one book atomically across replicas (a transaction-scoped advisory lock on its
        name); ``change`` returns the new book, or None to delete it."""
        v = self.t.versions
        with store_errors(), self.engine.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(literal(f"ragengine-book:{self.schema}:{name}")))))
            row = conn.execute(select(v.c.book).where(v.c.name == name)).first()
            new = change(row.book if row is not None else None)
            if new is None:
                conn.execute(delete(v).where(v.c.name == name))
            else:
                conn.execute(pg_insert(v).values(name=name, book=new).on_conflict_do_update(
                    index_elements=[v.c.name], set_={"book": new, "updated_at": func.now()}))
            return new


def _hit(doc_id: str, seq: int, text: str, metadata: dict, cosine: float, keyword_score: float | None = None) -> Hit:
    doc_metadata, tokens, place = split_chunk_metadata(metadata)
    return Hit(doc_id, seq, text, doc_metadata, cosine, keyword_score, tokens, place)
