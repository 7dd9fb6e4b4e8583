"""Every persisted format's version (ragengine/formats.py, docs/formats.md): damaged markers are refused, never
guessed at; data of a newer format is refused naming both versions, at start-up before anything is written (also by
an engine that waited for the folder's writer lock while a newer engine upgraded it), and in the files a request
brings (a /load copy, a journal, a queued upload); upgrades run step by step and resume after a crash.

The previous release's data, and the refused start of a real ``ragengine serve``: tests/engine/test_previous_release.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from ragengine import formats, preflight
from ragengine.conversations.uploads import ParseError, decode_job
from ragengine.index.journal import Journal, JournalCorrupt, encode
from ragengine.index.writer_lock import WriterLock
from ragengine.settings import EngineSettings
from ragengine.versions import build_registry
from tests.support.upgrade_data import folder_digest

pytestmark = pytest.mark.stores("faiss")

NEWER = formats.DATA.current + 1
DAMAGED = {
    "cut short": b'{"format": "ragengine-data", "vers',
    "empty": b"",
    "not a marker": b'{"hello": 1}',
    "a list": b"[1]",
    "no version": json.dumps({"format": formats.DATA.name}).encode(),
    "a version that is text": json.dumps({"format": formats.DATA.name, "version": "1"}).encode(),
    "a version that is true": json.dumps({"format": formats.DATA.name, "version": True}).encode(),
    "a negative version": json.dumps({"format": formats.DATA.name, "version": -1}).encode(),
}


async def _written(data: Path, embedder) -> None:
    """A data folder as this engine leaves it: one index, snapshotted at a clean stop."""
    registry = build_registry(EngineSettings(data_dir=data), embedder)
    await registry.start()
    await registry.add_documents("kb", [{"doc_id": "a", "text": "Herons nest in the reeds."}])
    await registry.close()


@pytest.mark.parametrize("damage", DAMAGED)
async def test_a_damaged_marker_is_refused_naming_the_file_and_nothing_is_written(tmp_path, embedder, damage):
    data = tmp_path / "data"
    await _written(data, embedder)
    marker = formats.marker_path(data)
    marker.write_bytes(DAMAGED[damage])
    before = folder_digest(data)
    with pytest.raises(formats.DamagedMarker, match=rf"^{marker}.*will not guess"):
        preflight.check(EngineSettings(data_dir=data))
    registry = build_registry(EngineSettings(data_dir=data), embedder)  # the store's own check
    with pytest.raises(formats.DamagedMarker, match=str(marker)):
        await registry.start()
    assert folder_digest(data) == before


def test_a_marker_that_is_a_folder_is_refused(tmp_path):
    formats.marker_path(tmp_path).mkdir()
    with pytest.raises(formats.DamagedMarker, match="unreadable"):
        formats.read_data_version(tmp_path)


async def test_the_app_refuses_a_newer_folder_before_any_part_starts(tmp_path, embedder):
    from ragengine.app import create_app
    from tests.support.embedding import borrowed

    data = tmp_path / "data"
    await _written(data, embedder)
    formats.write_marker(data, NEWER)
    before = folder_digest(data)
    app = create_app(EngineSettings(data_dir=data))
    with borrowed(embedder) as own, pytest.raises(formats.NewerFormat, match=f"format version {NEWER}"):
        app.state.embedder = own
        async with app.router.lifespan_context(app):
            pass
    assert not hasattr(app.state, "registry")  # stopped before the indexes' part
    assert folder_digest(data) == before


async def test_an_engine_waiting_for_the_lock_refuses_the_folder_a_newer_engine_upgraded_meanwhile(tmp_path, embedder):
    """The newer engine holds the folder; this one checked the marker (still its format) and waits for the lock; the
    newer one upgrades the folder and stops: this one refuses, and leaves the lock file as the newer one wrote it."""
    data = tmp_path / "data"
    await _written(data, embedder)
    newer = WriterLock(data / "indexes")
    await newer.acquire(timeout_s=1)
    registry = build_registry(EngineSettings(data_dir=data, writer_lock_timeout_seconds=60), embedder)
    waiting = asyncio.create_task(registry.start())
    await asyncio.sleep(0.5)
    assert not waiting.done()  # past the marker's first check, waiting for the lock
    formats.write_marker(data, NEWER)
    before = folder_digest(data)
    newer.release()
    with pytest.raises(formats.NewerFormat, match=f"format version {NEWER}"):
        await asyncio.wait_for(waiting, 30)
    assert folder_digest(data) == before  # the lock file still names the newer engine
    assert not registry.inner.durability.writer.held


@pytest.mark.parametrize("version", [NEWER, "2", None], ids=["newer", "text", "missing"])
def test_a_snapshot_copy_of_a_newer_or_damaged_format_is_refused_by_load(make_server, version):
    with make_server() as (base, app):
        assert httpx.post(f"{base}/index", json={"index_name": "kb", "documents": [
            {"doc_id": "a", "text": "Otters hunt at dusk."}]}).status_code == 200
        assert httpx.post(f"{base}/persist/kb", params={"path": "copy"}).status_code == 200
        manifest = app.state.settings.data_dir / "persist" / "copy" / "manifest.json"
        body = json.loads(manifest.read_text())
        manifest.write_text(json.dumps({**body, "version": version}))
        resp = httpx.post(f"{base}/load/other", params={"path": "copy"})
        assert resp.status_code == 400, resp.text
        if version == NEWER:
            assert f"index snapshot format version {NEWER}" in resp.json()["detail"]
            assert f"reads index snapshot formats up to version {formats.SNAPSHOT.current}" in resp.json()["detail"]
        else:
            assert "will not guess" in resp.json()["detail"]
        assert httpx.get(f"{base}/indexes").json() == ["kb"]


def test_a_journal_record_of_a_newer_format_is_refused_naming_both_versions(tmp_path):
    path = tmp_path / "journal.log"
    record = encode(1, {"delete": ["a"]}, None)
    path.write_bytes(record + b"RGJ%d" % (formats.JOURNAL.current + 1) + record[4:])
    with pytest.raises(JournalCorrupt, match=rf"index journal format version {formats.JOURNAL.current + 1}.*"
                                             rf"up to version {formats.JOURNAL.current}"):
        list(Journal(path, 4).read())


def test_a_queued_upload_of_a_newer_format_fails_naming_both_versions():
    with pytest.raises(ParseError, match=rf"queued upload format version {formats.PARSED.current + 1}"):
        decode_job(b"ragengine-parsed/%d\n{}" % (formats.PARSED.current + 1))
    assert decode_job(b"ragengine-parsed/x\nraw bytes of an old upload") is None  # not a marker: raw bytes


def test_upgrades_run_step_by_step_and_resume_after_a_crash(tmp_path, monkeypatch):
    """A future format 3: each step's files first, its marker last; a crash in step 2 leaves the folder marked 2."""
    monkeypatch.setattr(formats, "DATA", dataclasses.replace(formats.DATA, current=3))
    done: list[int] = []

    def step(n: int, fail: bool = False):
        def run(data: Path) -> None:
            if fail:
                raise RuntimeError(f"crash in step {n}")
            (data / f"step{n}").write_text("done")
            done.append(n)
        return run

    monkeypatch.setattr(formats, "UPGRADES", {0: step(0), 1: step(1), 2: step(2, fail=True)})
    with pytest.raises(RuntimeError, match="crash in step 2"):
        formats.upgrade_data_dir(tmp_path)
    assert formats.read_data_version(tmp_path) == 2 and done == [0, 1]
    formats.UPGRADES[2] = step(2)
    assert formats.upgrade_data_dir(tmp_path) == 2  # the version it had
    assert formats.read_data_version(tmp_path) == 3 and done == [0, 1, 2]
    assert formats.upgrade_data_dir(tmp_path) == 3 and done == [0, 1, 2]  # current: nothing runs, nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == [formats.MARKER, "step0", "step1", "step2"]
