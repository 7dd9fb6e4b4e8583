"""The shared ingestion queue's claims on a real PostgreSQL: concurrent claimers never get the same job, a
live lease keeps a job its holder's, an expired one lets another claimer take it, and the old holder's
updates are then refused (``LeaseLost``) instead of overwriting the new holder's."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from ragengine.conversations.file_records import LeaseLost
from ragengine.conversations.jobs import DatabaseJobs, LocalJobs, make_jobs
from ragengine.conversations.models import Base
from ragengine.conversations.store import SessionStore
from ragengine.settings import EngineSettings

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_store(pg_url):
    st = SessionStore(pg_url)
    Base.metadata.drop_all(st.engine)  # one server for the run: start from an empty database
    with st.engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    st.create_tables()
    yield st
    st.close()


async def _file(store: SessionStore, name: str) -> str:
    return (await store.create_file(filename=name, content_type="text/plain", size_bytes=3, data=b"abc")).id


async def test_concurrent_claims_take_each_job_once(pg_store):
    ids = {await _file(pg_store, f"f{i}.txt") for i in range(6)}
    claims = await asyncio.gather(*(pg_store.claim_job(f"owner-{i}", 60) for i in range(10)))
    taken = [c for c in claims if c is not None]
    assert sorted(fid for fid, _ in taken) == sorted(ids)  # every job once, the four extra claimers nothing
    assert {attempts for _, attempts in taken} == {1}
    assert await pg_store.claim_job("late", 60) is None  # live leases: nothing to take


async def test_a_job_being_claimed_elsewhere_is_skipped_not_waited_for(pg_store):
    first = await _file(pg_store, "first.txt")
    second = await _file(pg_store, "second.txt")
    with pg_store.engine.connect() as other:  # another replica, in the middle of claiming the oldest job
        other.execute(text("SELECT id FROM conv_files WHERE id = :id FOR UPDATE"), {"id": first})
        claimed = await asyncio.wait_for(pg_store.claim_job("me", 60), 10)  # blocks here without SKIP LOCKED
        assert claimed == (second, 1)
        other.rollback()
    assert await pg_store.claim_job("me-again", 60) == (first, 1)


async def test_an_expired_lease_is_taken_over_and_the_old_holder_refused(pg_store):
    fid = await _file(pg_store, "a.txt")
    assert await pg_store.claim_job("first", 60) == (fid, 1)
    await pg_store.update_file(fid, owner="first", status="processing", progress=0.5)
    assert await pg_store.renew_lease(fid, "first", 60)
    with pg_store.engine.begin() as conn:  # the holder stopped renewing (killed) and its lease ran out
        conn.execute(text("UPDATE conv_files SET lease_expires_at = timezone('UTC', now()) - interval '1 minute' "
                          "WHERE id = :id"), {"id": fid})
    assert await pg_store.claim_job("second", 60) == (fid, 2)
    assert not await pg_store.renew_lease(fid, "first", 60)
    with pytest.raises(LeaseLost):
        await pg_store.update_file(fid, owner="first", progress=0.9)
    await pg_store.update_file(fid, owner="second", drop_data=True, status="completed", progress=1.0)
    info = await pg_store.get_file(fid)
    assert (info.status, info.progress) == ("completed", 1.0)
    assert await pg_store.file_data(fid) is None
    assert await pg_store.claim_job("third", 60) is None  # a finished job is never claimed again


async def test_the_queue_follows_the_database(pg_store, tmp_path):
    settings = EngineSettings(data_dir=tmp_path)
    assert isinstance(make_jobs(pg_store, settings), DatabaseJobs)
    sqlite = SessionStore(f"sqlite:///{tmp_path / 'sessions.db'}")
    try:
        assert isinstance(make_jobs(sqlite, settings), LocalJobs)  # the single-pod default, as before
    finally:
        sqlite.close()
