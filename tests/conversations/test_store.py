"""The session store on SQLite and on a real PostgreSQL server (the same tests, parametrized)."""

from __future__ import annotations

import asyncio

import pytest

from ragengine.conversations.models import SessionRow
from ragengine.errors import NotFound
from tests.conversations.conftest import backdate


async def test_session_crud_and_history_order(store):
    s = await store.create_session(user_id="alice", title="t", metadata={"k": 1})
    other = await store.create_session(user_id="bob")
    for i in range(5):
        await store.add_message(s.id, "main", "user" if i % 2 == 0 else "assistant", f"m{i}", {"i": i})
    got = await store.get_session(s.id)
    assert got.message_count == 5 and got.metadata == {"k": 1} and got.user_id == "alice"
    assert [m.content for m in await store.history(s.id)] == [f"m{i}" for i in range(5)]
    assert [m.content for m in await store.history(s.id, last=2)] == ["m3", "m4"]
    assert [x.id for x in await store.list_sessions(user_id="alice")] == [s.id]
    assert {x.id for x in await store.list_sessions()} >= {s.id, other.id}
    await store.delete_session(s.id)
    with pytest.raises(NotFound):
        await store.get_session(s.id)
    with pytest.raises(NotFound):
        await store.history(s.id)
    assert [x.id for x in await store.list_sessions()] == [other.id]


async def test_threads_branch_and_inherit(store):
    s = await store.create_session()
    m1 = await store.add_message(s.id, "main", "user", "q1")
    m2 = await store.add_message(s.id, "main", "assistant", "a1")
    await store.add_message(s.id, "main", "user", "q2-main")
    branch = await store.create_thread(s.id, m2.id, title="alt")
    await store.add_message(s.id, branch.id, "user", "q2-branch")
    nested = await store.create_thread(s.id, m1.id)
    await store.add_message(s.id, nested.id, "user", "q1-redo")
    assert [m.content for m in await store.history(s.id, branch.id)] == ["q1", "a1", "q2-branch"]
    assert [m.content for m in await store.history(s.id, nested.id)] == ["q1", "q1-redo"]
    assert [m.content for m in await store.history(s.id, "main")] == ["q1", "a1", "q2-main"]
    threads = {t.id: t for t in await store.list_threads(s.id)}
    assert threads["main"].message_count == 3 and threads[branch.id].message_count == 1
    assert threads[branch.id].parent_message_id == m2.id and threads[branch.id].parent_thread_id == "main"
    # a thread of a branch point in the branch itself
    b_msgs = await store.history(s.id, branch.id)
    deeper = await store.create_thread(s.id, b_msgs[-1].id)
    assert [m.content for m in await store.history(s.id, deeper.id)] == ["q1", "a1", "q2-branch"]


async def test_unknown_ids_are_not_found(store):
    s = await store.create_session()
    other = await store.create_session()
    foreign = await store.add_message(other.id, "main", "user", "x")
    with pytest.raises(NotFound):
        await store.add_message(s.id, "nope", "user", "x")
    with pytest.raises(NotFound):
        await store.create_thread(s.id, foreign.id)  # a message of another session
    with pytest.raises(NotFound):
        await store.get_thread(s.id, "nope")
    with pytest.raises(NotFound):
        await store.delete_session("sess_missing")
    with pytest.raises(NotFound):
        await store.attach_files(s.id, ["file_missing"])


async def test_ttl_cleanup_deletes_idle_sessions_only(store):
    old = await store.create_session()
    await store.add_message(old.id, "main", "user", "x")
    backdate(store, SessionRow, old.id)  # idle for an hour
    fresh = await store.create_session()
    removed = await store.delete_expired(60)
    assert removed == [old.id]
    assert [s.id for s in await store.list_sessions()] == [fresh.id]
    with pytest.raises(NotFound):
        await store.history(old.id)


async def test_files_status_and_attachment(store):
    s = await store.create_session()
    f = await store.create_file(filename="a.md", content_type="text/markdown", size_bytes=10)
    assert f.status == "uploaded" and f.progress == 0.0
    await store.attach_files(s.id, [f.id, f.id])
    await store.update_file(f.id, status="processing", progress=0.5, text="hello")
    got = await store.get_file(f.id)
    assert (got.status, got.progress, got.text) == ("processing", 0.5, "hello")
    await store.update_file(f.id, status="completed", progress=1.0, doc_ids=["d1", "d2"], documents=2)
    [attached] = await store.session_files(s.id)
    assert attached.doc_ids == ("d1", "d2") and attached.status == "completed"
    assert await store.orphan_files(0) == []
    await store.detach_file(s.id, f.id)
    assert [x.id for x in await store.orphan_files(0)] == [f.id]
    with pytest.raises(NotFound):
        await store.detach_file(s.id, f.id)


async def test_concurrent_writers(store):
    s = await store.create_session()
    await asyncio.gather(*(store.add_message(s.id, "main", "user", f"m{i}") for i in range(40)))
    assert len(await store.history(s.id)) == 40


async def test_history_last_spans_branch_points(store):
    s = await store.create_session()
    msgs = [await store.add_message(s.id, "main", "user", f"m{i}") for i in range(6)]
    branch = await store.create_thread(s.id, msgs[3].id)
    await store.add_message(s.id, branch.id, "user", "b0")
    await store.add_message(s.id, branch.id, "user", "b1")
    assert [m.content for m in await store.history(s.id, branch.id, last=3)] == ["m3", "b0", "b1"]
    assert [m.content for m in await store.history(s.id, branch.id, last=2)] == ["b0", "b1"]
    assert [m.content for m in await store.history(s.id, branch.id, last=100)] == ["m0", "m1", "m2", "m3", "b0", "b1"]


async def test_the_files_quota_holds_under_concurrent_uploads(store):
    """Issue 41: /v1/files had no quota per principal. Eight uploads of 300 bytes at once against a 1,000-byte
    quota: three are recorded, the rest refused with nothing stored; another principal has its own quota, a
    failed file holds nothing, and deleting a file makes room."""
    from ragengine.errors import PayloadTooLarge

    async def upload(owner: str, size: int = 300, **kw) -> object:
        try:
            return await store.create_file(filename="f.txt", content_type="text/plain", size_bytes=size,
                                           data=b"x" * size, principal=owner, quota=1000, **kw)
        except PayloadTooLarge as exc:
            return exc

    results = await asyncio.gather(*(upload("key:a") for _ in range(8)))
    kept = [r for r in results if not isinstance(r, PayloadTooLarge)]
    refused = [r for r in results if isinstance(r, PayloadTooLarge)]
    assert len(kept) == 3 and len(refused) == 5, results
    assert "quota of 1000 bytes" in refused[0].message and refused[0].status_code == 413
    assert await store.held_bytes("key:a") == 900
    assert len(await store.list_files()) == 3  # nothing of a refused upload
    assert not isinstance(await upload("key:b"), PayloadTooLarge)  # per principal
    assert not isinstance(await upload("key:a", failed="unreadable"), PayloadTooLarge)  # holds no bytes
    assert isinstance(await upload("key:a", size=200), PayloadTooLarge)
    await store.delete_file(kept[0].id)  # type: ignore[attr-defined]
    assert not isinstance(await upload("key:a", size=200), PayloadTooLarge)
