"""OpenAI's vector stores on the engine's indexes: what each route does, returning OpenAI's objects.

A vector store is an index: its id is the index's name, so every index (``POST /index``, ``/load``, a
migration) is a vector store too, and a store created here is an index the KAITO routes, chat and
``/retrieve`` see. The one exception is the conversations index (every session's uploads), which is not
a vector store. A store created without files has a record and no index yet; its index is made by the
first file's chunks. Files are uploads (``/v1/files``); attaching one queues its ingestion into the
store's index (``ingest.py``). Search is the index's hybrid retrieval with OpenAI's filters over the
chunks' metadata, which holds the file's attributes.

The routes (``api/vector_stores.py``) only parse and call these methods; access control has already
checked that the caller may see the store (its index).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ragengine.access.acl import Acl
from ragengine.access.decide import missing_store_message
from ragengine.conversations.models import utcnow
from ragengine.conversations.store import SessionStore
from ragengine.errors import BadRequest, EngineError, Forbidden, NotFound
from ragengine.guardrails.answer import AnswerGuard
from ragengine.guardrails.runtime import Guardrails
from ragengine.index import disk
from ragengine.protocol.paging import cursor_page, list_object
from ragengine.protocol.vector_stores import (
    CreateFileBatchRequest,
    CreateVectorStoreFileRequest,
    CreateVectorStoreRequest,
    SearchRequest,
    UpdateVectorStoreRequest,
)
from ragengine.retrieval import filters as flt
from ragengine.settings import EngineSettings
from ragengine.vectorstores.catalog import Catalog
from ragengine.vectorstores.ingest import VectorStoreIngestion
from ragengine.vectorstores.objects import (
    StoreFileRecord,
    StoreRecord,
    StoreStats,
    batch_object,
    search_result,
    vector_store_file_object,
    vector_store_object,
)
from ragengine.vectorstores.rewrite import rewrite_for_search

if TYPE_CHECKING:
    from ragengine.index.api import IndexAPI
    from ragengine.llm.client import LLMClient

log = logging.getLogger(__name__)
TOUCH_EVERY_S = 60.0


def _cursor(fn: Callable[[], Any], param: str = "after") -> Any:
    try:
        return fn()
    except KeyError as exc:
        raise BadRequest(f"Unknown cursor '{exc.args[0]}': not an id in this list.", param=param) from None


class VectorStores:
    def __init__(self, settings: EngineSettings, catalog: Catalog, sessions: SessionStore, registry: IndexAPI, llm: LLMClient,
                 ingestion: VectorStoreIngestion, reserved: frozenset[str], guardrails: Guardrails | None = None) -> None:
        self.settings = settings
        self.guardrails = guardrails  # the output policy, for the queries the LLM rewrites (rewrite_query)
        self.catalog = catalog
        self.sessions = sessions
        self.registry = registry
        self.llm = llm
        self.ingestion = ingestion
        self.reserved = reserved
        self._touched: dict[str, float] = {}

    # --- which stores exist ----------------------------------------------------------------------------
    async def find(self, store_id: str, *, record: bool = True) -> StoreRecord | None:
        """The store's record; an index the API has not seen yet gets one now. ``record=False`` (a request
        that may still be refused): a stand-in instead, and the record is written by the request's first write
        (``_recorded``), so a refused request records nothing."""
        if store_id in self.reserved:
            return None
        found = await self.catalog.get_store(store_id)
        if found is None and await self.registry.chunking(store_id) is not None:
            if not record:
                now = utcnow()
                return StoreRecord(store_id, None, None, {}, None, now, now)
            found = await self.catalog.create_store(store_id, exist_ok=True)
        return found

    async def require(self, store_id: str, *, record: bool = True) -> StoreRecord:
        found = await self.find(store_id, record=record)
        if found is None:
            raise NotFound(missing_store_message(store_id), param="vector_store_id")
        return found

    async def _recorded(self, store_id: str) -> None:
        """The store's record, before a write that needs it (its files and batches refer to it)."""
        await self.catalog.create_store(store_id, exist_ok=True)

    async def usable(self, store_id: str, *, record: bool = True) -> StoreRecord:
        """A store a search may use: present and not expired."""
        found = await self.require(store_id, record=record)
        if found.expired(utcnow()):
            raise BadRequest(f"Vector store '{store_id}' has expired (expires_after); update it to use it again.",
                             param="vector_store_id")
        return found

    async def _object(self, record: StoreRecord) -> dict:
        stats = (await self.catalog.stats()).get(record.id, StoreStats())
        return vector_store_object(record, stats, utcnow())

    # --- stores ------------------------------------------------------------------------------------------
    async def create(self, body: CreateVectorStoreRequest, may_see: Callable[[str], bool], *,
                     files_of: str | None = None) -> dict:
        """``files_of``: whose uploads the caller may attach (``access.decide.owner_filter``; None: anyone's)."""
        store_id = body.index_name or f"vs_{uuid.uuid4().hex}"
        disk.validate_name(store_id)
        if store_id in self.reserved:
            raise BadRequest(f"'{store_id}' holds the conversations' uploads and cannot be a vector store.",
                             param="index_name")
        if not may_see(store_id):  # a generated name outside the caller's index patterns
            raise Forbidden("Your key may only use indexes matching its patterns; name the store's index with "
                            "'index_name' (extra_body={'index_name': ...} in the SDK).")
        uploads = [await self._upload(file_id, "file_ids", files_of) for file_id in body.file_ids]
        if await self.find(store_id, record=False) is not None:
            raise BadRequest(f"A vector store (index) named '{store_id}' already exists; use it by its id.",
                             param="index_name")
        record = await self.catalog.create_store(
            store_id, name=body.name, description=body.description, metadata=body.metadata,
            expires_after_days=body.expires_after.days if body.expires_after else None)
        strategy = body.chunking_strategy.model_dump() if body.chunking_strategy else None
        for info in uploads:
            await self._attach(record.id, info, {}, strategy)
        return await self._object(record)

    async def list_stores(self, may_see: Callable[[str], bool], *, limit: int, order: str, after: str | None,
                   before: str | None) -> dict:
        records = await self.catalog.stores()
        for name in await self.registry.list_names():
            if name not in records and name not in self.reserved:
                records[name] = await self.catalog.create_store(name, exist_ok=True)
        visible = sorted((r for r in records.values() if r.id not in self.reserved and may_see(r.id)),
                         key=lambda r: (r.created_at, r.id))
        page, more = _cursor(lambda: cursor_page(visible, lambda r: r.id, limit=limit, order=order, after=after,
                                                 before=before))
        stats, now = await self.catalog.stats(), utcnow()
        return list_object([vector_store_object(r, stats.get(r.id, StoreStats()), now) for r in page], more)

    async def get(self, store_id: str) -> dict:
        return await self._object(await self.require(store_id))

    async def update(self, store_id: str, body: UpdateVectorStoreRequest) -> dict:
        await self.require(store_id)
        values: dict[str, Any] = {}
        if "name" in body.model_fields_set:
            values["name"] = body.name
        if "metadata" in body.model_fields_set:
            values["metadata"] = body.metadata or {}
        if "expires_after" in body.model_fields_set:
            values["expires_after_days"] = body.expires_after.days if body.expires_after else None
        return await self._object(await self.catalog.update_store(store_id, values))

    async def delete(self, store_id: str) -> dict:
        await self.require(store_id)
        if await self.registry.chunking(store_id) is not None:
            await self.registry.delete_index(store_id)
        await self.catalog.delete_store(store_id)
        return {"id": store_id, "object": "vector_store.deleted", "deleted": True}

    # --- files of a store -------------------------------------------------------------------------------
    async def _upload(self, file_id: str, param: str, files_of: str | None) -> Any:
        """An upload the caller may attach: theirs (another's is "no such file", as on /v1/files), and readable.
        A file whose text could not be read at upload fails now, as OpenAI refuses a file it cannot parse when
        it is attached (400); later failures end the vector store file ``failed``."""
        try:
            info = await self.sessions.get_file(file_id, owned_by=files_of)
        except NotFound:
            raise NotFound(f"No such file: '{file_id}'.", param=param) from None
        if info.status == "failed" and info.text is None:
            raise BadRequest(f"File '{info.id}' cannot be attached: its ingestion failed: {info.reason}.",
                             param=param, code="invalid_file")
        return info

    async def _attach(self, store_id: str, info: Any, attributes: dict, strategy: dict | None,
                      batch_id: str | None = None) -> StoreFileRecord:
        record = await self.catalog.attach(store_id, info.id, attributes=attributes,
                                           chunking=strategy or {"type": "auto"}, batch_id=batch_id)
        self.ingestion.kick()
        return record

    async def attach(self, store_id: str, body: CreateVectorStoreFileRequest, *, files_of: str | None = None) -> dict:
        await self.usable(store_id, record=False)
        info = await self._upload(body.file_id, "file_id", files_of)
        strategy = body.chunking_strategy.model_dump() if body.chunking_strategy else None
        await self._recorded(store_id)
        return vector_store_file_object(await self._attach(store_id, info, body.attributes or {}, strategy))

    async def list_files(self, store_id: str, *, limit: int, order: str, after: str | None, before: str | None,
                         status: str | None, batch_id: str | None = None) -> dict:
        await self.require(store_id)
        if batch_id is not None:
            await self.catalog.get_batch(store_id, batch_id)
        records = await self.catalog.files(store_id, status=status, batch_id=batch_id)
        page, more = _cursor(lambda: cursor_page(records, lambda r: r.file_id, limit=limit, order=order, after=after,
                                                 before=before))
        return list_object([vector_store_file_object(r) for r in page], more)

    async def get_file(self, store_id: str, file_id: str) -> dict:
        await self.require(store_id)
        return vector_store_file_object(await self.catalog.get_file(store_id, file_id))

    async def update_file(self, store_id: str, file_id: str, attributes: dict | None) -> dict:
        """New attributes: the chunks' metadata is rewritten in place (their vectors are kept)."""
        await self.require(store_id, record=False)  # a store with a file has its record
        record = await self.catalog.get_file(store_id, file_id)
        attributes = attributes or {}
        if record.status == "completed" and record.doc_ids:
            docs = await self._chunks(store_id, record)
            for doc in docs:
                doc["metadata"] = {**attributes, "file_id": file_id, "filename": doc["metadata"].get("filename", "")}
            if docs:
                await self.registry.update_documents(store_id, docs)
        return vector_store_file_object(await self.catalog.set_attributes(store_id, file_id, attributes))

    async def _chunks(self, store_id: str, record: StoreFileRecord, acl: Acl | None = None) -> list[dict]:
        if await self.registry.chunking(store_id) is None:
            return []
        listed = await self.registry.list_documents(store_id, limit=max(1, len(record.doc_ids)),
                                                    max_text_length=None, metadata_filter={"file_id": record.file_id},
                                                    acl=acl)
        order = {d: i for i, d in enumerate(record.doc_ids)}
        docs = [{"doc_id": d["doc_id"], "text": d["text"], "metadata": d["metadata"] or {}}
                for d in listed["documents"] if d["doc_id"] in order]
        return sorted(docs, key=lambda d: order[d["doc_id"]])

    async def file_content(self, store_id: str, file_id: str, *, acl: Acl | None = None) -> dict:
        await self.require(store_id)
        record = await self.catalog.get_file(store_id, file_id)
        chunks = await self._chunks(store_id, record, acl)
        return {"object": "vector_store.file_content.page", "data": [{"type": "text", "text": d["text"]} for d in chunks],
                "has_more": False, "next_page": None}

    async def detach(self, store_id: str, file_id: str) -> dict:
        await self.require(store_id, record=False)
        record = await self.catalog.detach(store_id, file_id)
        await self._drop_chunks(store_id, record)
        return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}

    async def _drop_chunks(self, store_id: str, record: StoreFileRecord) -> None:
        if record.doc_ids and await self.registry.chunking(store_id) is not None:
            await self.registry.delete_documents(store_id, list(record.doc_ids))

    async def forget_file(self, file_id: str) -> None:
        """A file is deleted: it leaves every vector store, chunks included (as on OpenAI)."""
        for record in await self.catalog.stores_of_file(file_id):
            try:
                await self.catalog.detach(record.store_id, file_id)
                await self._drop_chunks(record.store_id, record)
            except EngineError as exc:
                log.warning("removing %s from vector store %s: %s", file_id, record.store_id, exc.message)

    # --- batches ----------------------------------------------------------------------------------------
    async def create_batch(self, store_id: str, body: CreateFileBatchRequest, *, files_of: str | None = None) -> dict:
        await self.usable(store_id, record=False)
        default = body.chunking_strategy.model_dump() if body.chunking_strategy else None
        if body.files is not None:
            entries = [(f.file_id, f.attributes if f.attributes is not None else (body.attributes or {}),
                        f.chunking_strategy.model_dump() if f.chunking_strategy else default) for f in body.files]
        else:
            entries = [(f, body.attributes or {}, default) for f in body.file_ids or []]
        entries = list({e[0]: e for e in entries}.values())  # a file named twice is attached once
        uploads = [await self._upload(file_id, "file_ids", files_of) for file_id, _attrs, _chunking in entries]
        await self._recorded(store_id)
        batch = await self.catalog.create_batch(store_id, [e[0] for e in entries])
        for info, (_file_id, attributes, chunking) in zip(uploads, entries, strict=True):
            await self._attach(store_id, info, attributes, chunking, batch_id=batch.id)
        return await self.get_batch(store_id, batch.id)

    async def get_batch(self, store_id: str, batch_id: str) -> dict:
        await self.require(store_id)
        batch = await self.catalog.get_batch(store_id, batch_id)
        files = await self.catalog.files(store_id, batch_id=batch_id)
        return batch_object(batch, [f.status for f in files])

    async def cancel_batch(self, store_id: str, batch_id: str) -> dict:
        await self.require(store_id, record=False)  # a store with a batch has its record
        await self.catalog.cancel_batch(store_id, batch_id)
        return await self.get_batch(store_id, batch_id)

    # --- search -----------------------------------------------------------------------------------------
    async def search(self, store_id: str, body: SearchRequest, *, acl: Acl | None = None) -> dict:
        """``acl``: the caller's document ACL (``access.decide.document_acl``; None sees every document)."""
        await self.usable(store_id, record=False)  # a search writes no record (a refused one least of all)
        queries = [body.query] if isinstance(body.query, str) else list(body.query)
        shown = queries
        if body.rewrite_query:
            out = AnswerGuard(self.guardrails, "vector_store_search")  # fail-closed: 503 before the LLM is asked
            queries = [await rewrite_for_search(self.llm, q) for q in queries]
            shown = out.scrub(queries)  # the LLM wrote them: through the output policy before they are shown
            out.close()
        threshold = body.ranking_options.score_threshold if body.ranking_options else None
        nodes = await self.retrieve([store_id], queries, body.max_num_results, body.filters, threshold or 0.0, acl=acl)
        return {"object": "vector_store.search_results.page", "search_query": shown,
                "data": [search_result(n) for n in nodes], "has_more": False, "next_page": None}

    async def retrieve(self, store_ids: list[str], queries: list[str], max_results: int, filters: dict | None,
                       threshold: float, *, acl: Acl | None = None) -> list:
        """The best chunks over ``store_ids`` and ``queries`` (each chunk once, with its best score), at or
        above ``threshold``. Also what a response's ``file_search`` runs."""
        if filters is not None:
            try:
                flt.parse_filters(filters)  # a 400 naming the fault, before any store is asked
            except BadRequest as exc:
                raise BadRequest(exc.message, param="filters") from None
        best: dict[tuple[str, str], Any] = {}
        for store_id in store_ids:
            await self.usable(store_id, record=False)
            if await self.registry.chunking(store_id) is None:
                continue  # no file ingested yet: nothing to find
            for query in queries:
                for node in await self.registry.retrieve(store_id, query, max_results, filters=filters, acl=acl):
                    key = (store_id, node.node_id)
                    if node.score >= threshold and (key not in best or best[key].score < node.score):
                        best[key] = node
        await self._touch(store_ids)
        return sorted(best.values(), key=lambda n: n.score, reverse=True)[:max_results]

    async def _touch(self, store_ids: list[str]) -> None:
        """``last_active_at`` (what ``expires_after`` counts from), written at most once a minute per store by
        this replica: a search must not cost a database write each time."""
        now = time.monotonic()
        due = [s for s in store_ids if now - self._touched.get(s, -TOUCH_EVERY_S) >= TOUCH_EVERY_S]
        if due:
            await self.catalog.touch(due)
            self._touched.update(dict.fromkeys(due, now))
