"""The message pipeline without an LLM (extractive answers), and TTL clean-up, against both stores."""

from __future__ import annotations

import asyncio

import pytest

from ragengine.api.conversations import cleanup_once
from ragengine.conversations.ingestion import IngestionWorker
from ragengine.conversations.models import FileRow, SessionRow
from ragengine.conversations.service import ConversationService
from ragengine.errors import NotFound
from ragengine.llm.client import LLMClient
from ragengine.protocol.conversations import MessageRequest
from ragengine.settings import EngineSettings
from tests.conversations.conftest import backdate
from tests.conversations.test_tools import FakeRegistry


async def drain(service, sid, **body):
    return [e async for e in service.run(sid, MessageRequest(**body))]


@pytest.fixture
async def no_llm(tmp_path):
    settings = EngineSettings(data_dir=tmp_path)
    llm = LLMClient(settings)
    yield settings, llm
    await llm.aclose()


async def test_without_llm_answers_extractively_from_scoped_files(store, no_llm):
    settings, llm = no_llm
    mine = await store.create_file(filename="a.txt", content_type="text/plain", size_bytes=1)
    other = await store.create_file(filename="b.txt", content_type="text/plain", size_bytes=1)
    for f in (mine, other):
        await store.update_file(f.id, status="completed")
    registry = FakeRegistry([
        {"doc_id": "d1", "text": "Penguins live in the southern hemisphere. They cannot fly.", "metadata": {"file_id": mine.id}},
        {"doc_id": "d2", "text": "Penguins secretly run the stock market.", "metadata": {"file_id": other.id}},
    ])
    s = await store.create_session()
    await store.attach_files(s.id, [mine.id])
    service = ConversationService(settings, store, registry, llm, None)
    for mode in ("rag", "tools"):
        events = await drain(service, s.id, content="Where do penguins live?", mode=mode)
        done = events[-1]
        assert done["type"] == "message_complete"
        meta = done["metadata"]
        assert meta["generation_method"] == "extractive_fallback" and "No LLM" in meta["fallback_reason"]
        assert [x["metadata"]["file_id"] for x in meta["sources"]] == [mine.id]
        assert "southern hemisphere" in done["assistant_message"]["content"]
        assert meta["groundedness"]["score"] == pytest.approx(1.0, abs=0.01)  # lexical only: no embedder
    plain = await drain(service, s.id, content="hi", mode="none")
    assert plain[-1]["assistant_message"]["content"] == "No language model is available to answer."
    assert len(await store.history(s.id)) == 6
    with pytest.raises(NotFound):
        await drain(service, "sess_missing", content="x")


async def test_ttl_cleanup_removes_idle_sessions_and_orphan_files(store, tmp_path):
    settings = EngineSettings(data_dir=tmp_path)
    worker = IngestionWorker(store, None, settings)
    old = await store.create_session()
    orphan = await store.create_file(filename="o.txt", content_type="text/plain", size_bytes=1)
    backdate(store, SessionRow, old.id)  # both idle for an hour
    backdate(store, FileRow, orphan.id)
    fresh = await store.create_session()
    kept = await store.create_file(filename="k.txt", content_type="text/plain", size_bytes=1)
    removed = await cleanup_once(store, worker, 60)
    assert removed == {"sessions": [old.id], "files": [orphan.id]}
    assert [s.id for s in await store.list_sessions()] == [fresh.id]
    assert [f.id for f in await store.list_files()] == [kept.id]


class RecordingRegistry:
    def __init__(self):
        self.docs: dict[str, dict] = {}

    def exists(self, name):
        return bool(self.docs)

    async def add_documents(self, index_name, documents):
        for d in documents:
            self.docs[d["doc_id"]] = d
        return documents

    async def delete_documents(self, index_name, doc_ids):
        for d in doc_ids:
            self.docs.pop(d, None)
        return {}


async def wait_status(store, file_id, timeout=30):
    for _ in range(int(timeout / 0.02)):
        info = await store.get_file(file_id)
        if info.status in ("completed", "failed"):
            return info
        await asyncio.sleep(0.02)
    raise AssertionError(f"stuck in {info.status}")


async def test_ingestion_worker_recovers_after_restart_and_fails_broken_pdfs(store, tmp_path):
    from tests.conversations.test_uploads import make_pdf

    settings = EngineSettings(data_dir=tmp_path)
    registry = RecordingRegistry()
    # a file left "processing" by a crash, with a stale document from the interrupted run; its bytes where
    # the queue of this database keeps them (SQLite: the data volume; PostgreSQL: the database)
    pdf = make_pdf(["Page one text", "Page two text"])
    shared = store.dialect == "postgresql"
    stuck = await store.create_file(filename="s.pdf", content_type="application/pdf", size_bytes=1,
                                    data=pdf if shared else None)
    await store.update_file(stuck.id, status="processing", progress=0.4, doc_ids=[f"{stuck.id}-0"])
    registry.docs[f"{stuck.id}-0"] = {"doc_id": f"{stuck.id}-0", "text": "stale"}
    if not shared:
        (tmp_path / "uploads").mkdir()
        (tmp_path / "uploads" / stuck.id).write_bytes(pdf)
    worker = IngestionWorker(store, registry, settings)
    await worker.start()
    try:
        done = await wait_status(store, stuck.id)
        assert (done.status, done.progress, done.documents) == ("completed", 1.0, 2)
        assert {d["metadata"]["page"] for d in registry.docs.values()} == {1, 2}
        assert all(d["metadata"]["file_id"] == stuck.id for d in registry.docs.values())
        await worker.idle()  # the local queue removes the bytes just after the status says completed
        assert "Page one text" in done.text and not (tmp_path / "uploads" / stuck.id).exists()
        assert await store.file_data(stuck.id) is None  # the bytes go when the job ends

        broken = await worker.accept("b.pdf", "application/pdf", b"%PDF-1.7\n%garbage")
        failed = await wait_status(store, broken.id)
        assert failed.status == "failed" and "could not be read" in failed.reason
        missing = await store.create_file(filename="m.txt", content_type="text/plain", size_bytes=1)
        if not shared:  # the shared queue finds it by itself
            await worker.jobs.queue.put(missing.id)
        assert "missing" in (await wait_status(store, missing.id)).reason
        await worker.delete(stuck.id)
        assert registry.docs == {}
    finally:
        await worker.stop()
