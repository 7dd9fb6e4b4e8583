"""``StoreAdapter`` over Milvus through pymilvus (a Milvus server, or Milvus Lite from a local file path).

Layout: ``<prefix>_indexes`` lists the indexes (name, chunking config, collection); each index has a
chunks collection (text, metadata JSON, dense vector under HNSW/cosine, and a sparse vector that
Milvus' own BM25 function fills from the text, for the keyword side) and a documents collection (the
full text, cut in parts because a Milvus VARCHAR holds at most 65,535 bytes, plus an insertion
sequence for listing in order). Collections use Strong consistency, so a write acknowledged by one
replica is read by every other.

Why not llama-index's ``MilvusVectorStore``: it keeps no documents (listing and updates need them),
its filters cover fewer operators, and it cannot express "missing key counts as not equal".

Filters become Milvus boolean expressions built from the parsed tree: keys and string values are
escaped (``\\`` and ``"``), numbers are written from Python numbers, so nothing a client sends can
change the expression's structure. Milvus' expression language compares ``true`` equal to ``1`` and
treats a missing key as unknown under ``not``; the expression is therefore written as a superset
(``is null or not (…)``) and every hit is checked again with ``filters.matches`` (over-fetching when
that removes hits), so results are exactly the engine's filter semantics. Document ACLs too: the
expression admits documents without ``acl`` or with one sharing an entry, and the re-check drops the
malformed ones, so the ACL holds before top-k.

Milvus has no multi-row transactions: a write stores chunks first and the document rows last (the
document row is what listing and the add/update checks see), with deterministic primary keys, so a
retried or repeated write converges; between the two steps a search may already see new chunks.

Each index's collections are made with its own vector dimension (``<prefix>_indexes`` records it), so
index versions of models of different dimensions live side by side. ``<prefix>_versions`` holds the
version books (ragengine.versions) as JSON, one row each: a book update is one upsert, serialised within
this process (Milvus has no compare-and-set: across replicas the last writer wins, docs/versions.md).

Longer than 400 lines on purpose: one class is the whole ``StoreAdapter`` contract over one Milvus client (its
methods share the client, the collection cache and the write order above).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ragengine.index.documents import DocSearch, content_digest
from ragengine.retrieval import filters as flt
from ragengine.stores.base import (
    ChunkWrite,
    DocumentRace,
    DocWrite,
    Hit,
    NoSuchIndex,
    StoredDoc,
    StoreUnavailable,
    chunk_metadata,
    describe,
    split_chunk_metadata,
)

log = logging.getLogger(__name__)
PART_CHARS = 16_000  # document text per row: 16k characters stay under 65,535 UTF-8 bytes
MAX_TEXT = 65_535
QUERY_PAGE = 1000
ANY_ROW = 'pk != ""'  # a condition every row meets (every collection has a non-empty VARCHAR key "pk")


_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"} | {
    chr(i): f"\\u{i:04x}" for i in range(0x20) if i not in (9, 10, 13)}


def literal(value: Any) -> str:
    """A filter value as a Milvus expression literal (strings escaped, numbers from Python)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite number in a filter")
        return repr(value)
    if isinstance(value, str):
        # Backslash and quote escaped; control characters (a newline ends a Milvus literal) as escapes.
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return '"' + "".join(_CONTROL.get(ch, ch) if ord(ch) < 0x20 else ch for ch in escaped) + '"'
    raise ValueError(f"unsupported filter value {value!r}")


def to_expr(f: flt.Filter, field: str = "metadata") -> str:
    """A Milvus expression selecting a superset of what ``filters.matches`` accepts (exact for strings;
    ``true``/``1`` and missing keys are refined by the caller's re-check)."""
    if isinstance(f, flt.Acl):
        # Superset: no acl, or one sharing an entry; the re-check (filters.matches) drops malformed ones.
        ref = f"{field}[{literal(flt.ACL_KEY)}]"
        if not f.tokens:
            return f"({ref} is null)"
        return f"({ref} is null or json_contains_any({ref}, [{', '.join(literal(t) for t in f.tokens)}]))"
    if isinstance(f, flt.Compound):
        joiner = " and " if f.op == "and" else " or "
        return "(" + joiner.join(to_expr(s, field) for s in f.filters) + ")"
    ref = f"{field}[{literal(f.key)}]"

    def eq(v: Any) -> str:
        return f"({ref} == {literal(v)} or json_contains({ref}, {literal(v)}))"

    if f.op == "eq":
        return eq(f.value)
    if f.op in ("ne", "nin") and any(isinstance(v, (bool, int, float)) for v in _values(f)):
        return ANY_ROW  # Milvus equates true and 1, so "not equal" could drop rows: the re-check decides
    if f.op == "ne":
        return f"({ref} is null or not {eq(f.value)})"
    if f.op == "in":
        return "(" + " or ".join(eq(v) for v in f.value) + ")"
    if f.op == "nin":
        return f"({ref} is null or not (" + " or ".join(eq(v) for v in f.value) + "))"
    op = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[f.op]
    return f"({ref} {op} {literal(f.value)})"


def _values(f: flt.Condition) -> tuple:
    return f.value if isinstance(f.value, tuple) else (f.value,)


def _collection_key(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:20]


class MilvusStore:
    kind = "milvus"

    def __init__(self, uri: str, *, prefix: str, dim: int, hnsw_m: int = 16, ef_construction: int = 64,
                 ef_search: int = 100, token: str | None = None) -> None:
        self.uri, self.token = uri, token
        self.prefix, self.dim = prefix, dim
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self._client: Any = None
        self._lock = threading.Lock()
        self._loaded: set[str] = set()
        self.registry = f"{prefix}_indexes"
        self.versions = f"{prefix}_versions"
        self._dims: dict[str, int] = {}  # index -> its vectors' dimension (fixed for the index's life)

    # -- lifecycle ---------------------------------------------------------------------------------
    def _c(self) -> Any:
        if self._client is None:
            from pymilvus import MilvusClient

            try:
                self._client = MilvusClient(self.uri, token=self.token or "")
            except Exception as exc:
                raise StoreUnavailable(describe(exc)) from exc
        return self._client

    def _call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._c(), fn)(*args, **kwargs)
        except StoreUnavailable:
            raise
        except Exception as exc:
            raise StoreUnavailable(describe(exc)) from exc

    def open(self) -> None:
        from pymilvus import DataType, MilvusClient

        with self._lock:
            if not self._call("has_collection", self.registry):
                schema = MilvusClient.create_schema(auto_id=False)
                schema.add_field("name", DataType.VARCHAR, is_primary=True, max_length=1024)
                schema.add_field("config", DataType.JSON)
                schema.add_field("collection", DataType.VARCHAR, max_length=128)
                schema.add_field("dim", DataType.INT64)
                schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)  # Milvus needs one vector field
                params = self._c().prepare_index_params()
                params.add_index("vec", index_type="FLAT", metric_type="L2")
                self._call("create_collection", self.registry, schema=schema, index_params=params,
                           consistency_level="Strong")
            self._load(self.registry)
            if not self._call("has_collection", self.versions):
                schema = MilvusClient.create_schema(auto_id=False)
                schema.add_field("name", DataType.VARCHAR, is_primary=True, max_length=1024)
                schema.add_field("book", DataType.JSON)
                schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
                params = self._c().prepare_index_params()
                params.add_index("vec", index_type="FLAT", metric_type="L2")
                self._call("create_collection", self.versions, schema=schema, index_params=params,
                           consistency_level="Strong")
            self._load(self.versions)
        # Indexes of another dimension than the model's are kept as they are: each has its own collections.

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing a broken connection must not hide the shutdown
                log.debug("closing the Milvus client failed", exc_info=True)
            self._client = None
            self._loaded.clear()

    def maintain(self) -> list[str]:
        return []  # Milvus builds and compacts its indexes itself

    def ping(self) -> None:
        self._call("has_collection", self.registry)

    def _load(self, collection: str) -> None:
        if collection not in self._loaded:
            self._call("load_collection", collection)
            self._loaded.add(collection)

    def _registry_rows(self) -> list[dict]:
        self._load(self.registry)
        return self._call("query", self.registry, filter='name != ""', output_fields=["name", "config", "collection", "dim"],
                          limit=16384)

    # -- collections -------------------------------------------------------------------------------
    def _collections(self, name: str) -> tuple[str, str] | None:
        rows = self._call("query", self.registry, filter=f"name == {literal(name)}", output_fields=["collection", "dim"])
        if not rows:
            return None
        base = rows[0]["collection"]
        self._dims[name] = int(rows[0].get("dim") or self.dim)
        return f"{base}_chunks", f"{base}_docs"

    def dim_of(self, name: str) -> int | None:
        """The dimension of index ``name``'s vectors (None: no such index)."""
        return self._dims[name] if self._collections(name) is not None else None

    def _ensure_index(self, name: str, config: dict, dim: int | None = None) -> tuple[str, str]:
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        dim = dim or self.dim
        found = self._collections(name)
        if found is not None:
            self._load(found[0])
            self._load(found[1])
            return found
        base = f"{self.prefix}_{_collection_key(name)}"
        chunks, docs = f"{base}_chunks", f"{base}_docs"
        schema = MilvusClient.create_schema(auto_id=False)
        schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=1100)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=1100)
        schema.add_field("seq", DataType.INT64)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT)
        schema.add_field("search_text", DataType.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True)
        schema.add_field("metadata", DataType.JSON)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["search_text"],
                                     output_field_names=["sparse"]))
        params = self._c().prepare_index_params()
        params.add_index("vec", index_type="HNSW", metric_type="COSINE",
                         params={"M": self.hnsw_m, "efConstruction": self.ef_construction})
        params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        self._call("create_collection", chunks, schema=schema, index_params=params, consistency_level="Strong")
        schema = MilvusClient.create_schema(auto_id=False)
        schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=1100)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=1100)
        schema.add_field("part", DataType.INT64)
        schema.add_field("pos", DataType.INT64)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT)
        schema.add_field("metadata", DataType.JSON)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
        params = self._c().prepare_index_params()
        params.add_index("vec", index_type="FLAT", metric_type="L2")
        self._call("create_collection", docs, schema=schema, index_params=params, consistency_level="Strong")
        self._call("upsert", self.registry, [{"name": name, "config": config, "collection": base, "dim": dim,
                                              "vec": [0.0, 0.0]}])
        self._dims[name] = dim
        self._load(chunks)
        self._load(docs)
        return chunks, docs

    def _index(self, name: str) -> tuple[str, str]:
        found = self._collections(name)
        if found is None:
            raise NoSuchIndex(name)
        self._load(found[0])
        self._load(found[1])
        return found

    # -- reads -------------------------------------------------------------------------------------
    def indexes(self) -> dict[str, dict]:
        return {r["name"]: r["config"] for r in self._registry_rows()}

    def counts(self) -> dict[str, tuple[int, int]]:
        out = {}
        for row in self._registry_rows():
            base = row["collection"]
            self._load(f"{base}_chunks")
            self._load(f"{base}_docs")
            docs = self._call("query", f"{base}_docs", filter="part == 0", output_fields=["count(*)"])
            chunks = self._call("query", f"{base}_chunks", filter='pk != ""', output_fields=["count(*)"])
            out[row["name"]] = (int(docs[0]["count(*)"]), int(chunks[0]["count(*)"]))
        return out

    def drop_index(self, name: str) -> bool:
        found = self._collections(name)
        if found is None:
            return False
        self._call("delete", self.registry, filter=f"name == {literal(name)}")
        for collection in found:
            self._call("drop_collection", collection)
            self._loaded.discard(collection)
        return True

    def _doc_rows(self, docs: str, doc_ids: list[str], fields: list[str]) -> list[dict]:
        rows: list[dict] = []
        for i in range(0, len(doc_ids), 500):
            batch = doc_ids[i:i + 500]
            expr = "doc_id in [" + ", ".join(literal(d) for d in batch) + "]"
            rows.extend(self._call("query", docs, filter=expr, output_fields=fields, limit=16384))
        return rows

    def get_documents(self, name: str, doc_ids: list[str]) -> dict[str, StoredDoc]:
        try:
            _, docs = self._index(name)
        except KeyError:
            return {}
        return _assemble(self._doc_rows(docs, list(dict.fromkeys(doc_ids)), ["doc_id", "part", "text", "metadata"]))

    def chunk_vectors(self, name: str, doc_id: str) -> tuple[list[ChunkWrite], np.ndarray]:
        return self.chunks_of(name, [doc_id]).get(doc_id) or ([], np.zeros((0, self.dim), np.float32))

    def chunks_of(self, name: str, doc_ids: list[str]) -> dict[str, tuple[list[ChunkWrite], np.ndarray]]:
        """Per document: its chunks in order and their stored vectors (exports, metadata-only updates)."""
        chunks, _ = self._index(name)
        dim = self._dims.get(name, self.dim)
        rows: list[dict] = []
        for i in range(0, len(doc_ids), 200):
            expr = "doc_id in [" + ", ".join(literal(d) for d in doc_ids[i:i + 200]) + "]"
            rows.extend(self._query_all(chunks, expr, ["doc_id", "seq", "text", "search_text", "metadata", "vec"]))
        by_doc: dict[str, list[dict]] = {}
        for r in rows:
            by_doc.setdefault(r["doc_id"], []).append(r)
        out = {}
        for doc_id, rs in by_doc.items():
            rs.sort(key=lambda r: r["seq"])
            vectors = np.array([r["vec"] for r in rs], dtype=np.float32).reshape(len(rs), dim)
            out[doc_id] = ([ChunkWrite(int(r["seq"]), r["text"], r["search_text"], *split_chunk_metadata(r["metadata"])[1:])
                            for r in rs], vectors)
        return out

    def digests(self, name: str) -> dict[str, str]:
        """doc_id -> digest of the document's text and metadata (every document row read)."""
        try:
            _, docs = self._index(name)
        except KeyError:
            return {}
        found = _assemble(self._query_all(docs, ANY_ROW, ["doc_id", "part", "text", "metadata"]))
        return {d: content_digest(doc.text, doc.metadata) for d, doc in found.items()}

    def list_documents(self, name: str, f: flt.Filter | None, offset: int, limit: int,
                       search: DocSearch | None = None) -> tuple[list[StoredDoc], int]:
        _, docs = self._index(name)
        expr = "part == 0" + (f" and {to_expr(f)}" if f is not None else "")
        if search is not None and search.doc_id is not None:
            expr += f" and doc_id == {literal(search.doc_id)}"
        heads = [r for r in self._query_all(docs, expr, ["doc_id", "pos", "metadata"]) if flt.matches(f, r["metadata"])]
        if search is not None and search.text is not None:
            # Milvus' LIKE is case-sensitive and a text spans parts: match the whole texts here
            texts = _assemble(self._query_all(docs, ANY_ROW, ["doc_id", "part", "text", "metadata"]))
            heads = [r for r in heads if r["doc_id"] in texts and search.matches(r["doc_id"], texts[r["doc_id"]].text)]
        heads.sort(key=lambda r: r["pos"])
        page = [r["doc_id"] for r in heads[offset:offset + limit]]
        found = _assemble(self._doc_rows(docs, page, ["doc_id", "part", "text", "metadata"])) if page else {}
        return [found[d] for d in page if d in found], len(heads)

    def _query_all(self, collection: str, expr: str, fields: list[str]) -> list[dict]:
        iterator = self._call("query_iterator", collection, batch_size=QUERY_PAGE, filter=expr, output_fields=fields)
        rows: list[dict] = []
        try:
            while batch := iterator.next():
                rows.extend(batch)
        except Exception as exc:
            raise StoreUnavailable(describe(exc)) from exc
        finally:
            iterator.close()
        return rows

    def _search(self, name: str, data: Any, field: str, k: int, f: flt.Filter | None, params: dict) -> list[dict]:
        chunks, _ = self._index(name)
        expr = to_expr(f) if f is not None else ""
        fetch = k
        while True:  # over-fetch when the exact re-check removes hits that the expression let through
            res = self._call("search", chunks, data=[data], anns_field=field, limit=fetch, filter=expr,
                             output_fields=["doc_id", "seq", "text", "metadata", "vec"], search_params=params)
            raw = list(res[0]) if res else []
            kept = [h for h in raw if flt.matches(f, h["entity"]["metadata"])]
            if len(kept) >= k or len(raw) < fetch or fetch >= 16384:
                return kept[:k]
            fetch = min(fetch * 4, 16384)

    def dense(self, name: str, query: np.ndarray, k: int, f: flt.Filter | None) -> list[Hit]:
        q = np.asarray(query, dtype=np.float32)
        hits = self._search(name, q.tolist(), "vec", k, f, {"metric_type": "COSINE", "params": {"ef": max(self.ef_search, k)}})
        return [_hit(h, q) for h in hits]

    def keyword(self, name: str, query: str, query_vector: np.ndarray, k: int, f: flt.Filter | None) -> list[Hit]:
        if not query.strip():
            return []
        q = np.asarray(query_vector, dtype=np.float32)
        hits = self._search(name, query, "sparse", k, f, {"metric_type": "BM25"})
        return [_hit(h, q, keyword=True) for h in hits]

    # -- writes ------------------------------------------------------------------------------------
    def write(self, name: str, config: dict, delete_ids: list[str], add: list[DocWrite], vectors: np.ndarray | None,
              *, add_only: bool, dim: int | None = None, source: str | None = None) -> None:
        """``dim``: a new index's vector dimension (default: the model's). ``source``: only the documents index
        ``source`` holds with the same text and metadata (checked just before writing: no transaction here)."""
        with self._lock:  # one writer per engine process; across replicas, deterministic keys converge
            chunks, docs = self._ensure_index(name, config, dim)
            if source is not None:
                held = self.get_documents(source, [d.doc_id for d in add])
                keep = {d.doc_id for d in add if d.doc_id in held
                        and (held[d.doc_id].text, held[d.doc_id].metadata) == (d.text, d.metadata)}
                rows: list[int] = []
                kept: list[DocWrite] = []
                pos = 0
                for doc in add:
                    if doc.doc_id in keep:
                        kept.append(doc)
                        rows.extend(range(pos, pos + len(doc.chunks)))
                    pos += len(doc.chunks)
                add, vectors = kept, (vectors[rows] if vectors is not None and rows else None)
                delete_ids = [d for d in delete_ids if d in keep]
            skip: set[str] = set()
            if add_only and add:
                held = self.get_documents(name, [d.doc_id for d in add])
                for doc in add:
                    if doc.doc_id in held:
                        if held[doc.doc_id].text != doc.text:
                            raise DocumentRace(doc.doc_id)
                        skip.add(doc.doc_id)
            gone = list(dict.fromkeys(delete_ids))
            for i in range(0, len(gone), 500):
                expr = "doc_id in [" + ", ".join(literal(d) for d in gone[i:i + 500]) + "]"
                self._call("delete", docs, filter=expr)  # the document first: it is what readers check
                self._call("delete", chunks, filter=expr)
            chunk_rows, doc_rows, pos = [], [], 0
            seq_base = time.time_ns()
            for j, doc in enumerate(add):
                if doc.doc_id not in skip:
                    for i, chunk in enumerate(doc.chunks):
                        if vectors is None or pos + i >= len(vectors):
                            raise ValueError("write() got fewer vectors than chunks")
                        chunk_rows.append({"pk": f"{doc.doc_id}#{chunk.seq}", "doc_id": doc.doc_id, "seq": chunk.seq,
                                           "text": chunk.text[:MAX_TEXT // 4],
                                           "search_text": chunk.indexed_text[:MAX_TEXT // 4],
                                           "metadata": chunk_metadata(doc.metadata, chunk.tokens, chunk.place),
                                           "vec": np.asarray(vectors[pos + i], dtype=np.float32).tolist()})
                    parts = [doc.text[i:i + PART_CHARS] for i in range(0, len(doc.text), PART_CHARS)] or [""]
                    for p, part in enumerate(parts):
                        doc_rows.append({"pk": f"{doc.doc_id}#{p}", "doc_id": doc.doc_id, "part": p, "pos": seq_base + j,
                                         "text": part, "metadata": doc.metadata, "vec": [0.0, 0.0]})
                pos += len(doc.chunks)
            for i in range(0, len(chunk_rows), 500):
                self._call("upsert", chunks, chunk_rows[i:i + 500])
            for i in range(0, len(doc_rows), 500):
                self._call("upsert", docs, doc_rows[i:i + 500])


    # -- version books (ragengine.versions) ---------------------------------------------------------
    def books(self) -> dict[str, dict]:
        self._load(self.versions)
        rows = self._call("query", self.versions, filter='name != "" or name == ""', output_fields=["name", "book"],
                          limit=16384)
        return {r["name"]: r["book"] for r in rows}

    def book_update(self, name: str, change: Callable[[dict | None], dict | None]) -> dict | None:
        """Read-modify-write one book (serialised in this process; across replicas the last writer wins)."""
        with self._lock:
            self._load(self.versions)
            rows = self._call("query", self.versions, filter=f"name == {literal(name)}", output_fields=["book"])
            new = change(rows[0]["book"] if rows else None)
            if new is None:
                self._call("delete", self.versions, filter=f"name == {literal(name)}")
            else:
                self._call("upsert", self.versions, [{"name": name, "book": new, "vec": [0.0, 0.0]}])
            return new


def _assemble(rows: list[dict]) -> dict[str, StoredDoc]:
    parts: dict[str, list[dict]] = {}
    for row in rows:
        parts.setdefault(row["doc_id"], []).append(row)
    out = {}
    for doc_id, rs in parts.items():
        rs.sort(key=lambda r: r["part"])
        if rs[0]["part"] != 0:
            continue
        out[doc_id] = StoredDoc(doc_id, "".join(r["text"] for r in rs), rs[0]["metadata"])
    return out


def _hit(h: dict, q: np.ndarray, *, keyword: bool = False) -> Hit:
    e = h["entity"]
    cosine = float(np.dot(np.asarray(e["vec"], dtype=np.float32), q))
    # BM25 "distance": a Milvus server reports the score, Milvus Lite its negative; both list best first.
    score = abs(float(h["distance"])) if keyword else None
    metadata, tokens, place = split_chunk_metadata(e["metadata"])
    return Hit(e["doc_id"], int(e["seq"]), e["text"], metadata, cosine, score, tokens, place)

