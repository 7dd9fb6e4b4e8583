"""The data folder's writer lock (index/writer_lock.py): a second holder waits, then fails naming the first."""

from __future__ import annotations

import asyncio
import os

import pytest

from ragengine.index.writer_lock import DataDirBusy, WriterLock


async def test_a_second_holder_waits_and_gives_up_naming_the_first(tmp_path, caplog):
    first, second = WriterLock(tmp_path), WriterLock(tmp_path)
    await first.acquire(timeout_s=1)
    assert f"pid={os.getpid()}" in first.holder()
    with pytest.raises(DataDirBusy, match=rf"another engine process \(host=\S+ pid={os.getpid()} since=\S+\) still holds"):
        await second.acquire(timeout_s=0.5, poll_s=0.05, report_every_s=0.2)
    assert "waiting for the engine process that holds" in caplog.text
    assert not second.held

    waiting = asyncio.create_task(second.acquire(timeout_s=10, poll_s=0.05))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # still waiting while the first holds it
    first.release()
    await asyncio.wait_for(waiting, 5)
    assert second.held and not first.held
    second.release()
