"""The previous release's data, read by this engine: format fixtures written by running that release (issue 48).

The release pinned in hack/previous-release.env runs as its own ``ragengine serve`` (tests/support/previous_release.py)
and writes a data folder as users' folders were written (tests/support/upgrade_data.py): an index with documents and
a second version made by a re-index, writes that only the journal holds (the release is killed with -9 after them,
its snapshot threshold small so that snapshots exist too), sessions with messages, uploaded files, a vector store,
and an export file. That release writes no format marker (format 0, "unmarked").

This engine then starts on a copy of that folder, is killed with -9 as soon as its in-place upgrade has marked the
folder (mid-start), starts again, and serves every document, version, session, message, file and vector store
exactly as the previous release served them; the export imports. The upgrade also survives a crash injected at each
of its steps. Finally the folder, written by this engine, is made newer (a marker of format 2, a sessions schema
revision this engine does not know, a damaged marker): this engine refuses to start, naming the file and both
versions, and the folder is left byte for byte as it was.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import signal
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragengine import formats
from ragengine.conversations.schema import MIGRATIONS
from tests.support import previous_release
from tests.support.engine_process import engine_process
from tests.support.server import START_TIMEOUT_S
from tests.support.upgrade_data import as_served_before, refused_start, seed, view

# Snapshots during the seeding (a journal past 3 kB), so the folder holds snapshots and journals both.
OLD_SETTINGS = {"snapshot_journal_bytes": "3000"}
LATE_FILE = ("moorings.md", b"# Moorings\n\nThe east pontoon takes boats up to twelve metres.")


@dataclass
class Written:
    data: Path
    seeded: dict[str, Any]
    before: dict[str, Any]
    export: bytes
    late_file: str  # uploaded just before the kill: queued, being ingested, or done


@dataclass
class Upgraded:
    data: Path
    after: dict[str, Any]
    late: dict
    late_hits: list[str]
    imported: httpx.Response
    restored: dict


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> Written:
    work = tmp_path_factory.mktemp("previous")
    with previous_release.engine_process(work, settings=OLD_SETTINGS) as old:
        seeded = seed(old.base_url)
        before = view(old.base_url, seeded)
        export = httpx.get(f"{old.base_url}/indexes/kb/export", timeout=120)
        assert export.status_code == 200, export.text
        late = httpx.post(f"{old.base_url}/v1/files", files={"file": (*LATE_FILE, "text/markdown")},
                          data={"session_id": seeded["session"]}, timeout=60)
        assert late.status_code == 202, late.text
        old.process.send_signal(signal.SIGKILL)
        old.process.wait(10)
    data = work / "data"
    assert not formats.marker_path(data).exists()  # the previous release ran: it writes no marker
    v2 = data / "indexes" / "kb%2Fv2"  # kb's second version: a snapshot, and a write only its journal holds
    assert (v2 / "snapshot" / "manifest.json").is_file() and (v2 / "journal.log").stat().st_size > 0
    return Written(data, seeded, before, export.content, late.json()["id"])


def _wait_marked(engine, data: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not formats.marker_path(data).exists():
        assert engine.process.poll() is None, (engine.data_dir.parent / "engine.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "the folder was never marked"
        time.sleep(0.01)


def _wait_ingested(base: str, file_id: str) -> dict:
    deadline = time.monotonic() + 120
    while True:
        body = httpx.get(f"{base}/v1/files/{file_id}", timeout=30).json()
        if body["ingestion_status"] not in ("uploaded", "processing"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


@pytest.fixture(scope="module")
def upgraded(previous, tmp_path_factory) -> Upgraded:
    work = tmp_path_factory.mktemp("upgraded")
    data = work / "data"
    shutil.copytree(previous.data, data)
    with engine_process(work, llm=False, wait_ready=False) as first:  # killed -9 mid-start, just after the upgrade
        _wait_marked(first, data)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
    with engine_process(work) as engine:
        base = engine.base_url
        late = _wait_ingested(base, previous.late_file)
        hits = httpx.post(f"{base}/retrieve", json={"index_name": "conversations", "query": "east pontoon boats",
                                                     "max_node_count": 1}, timeout=60).json()["results"]
        after = view(base, previous.seeded, skip=(previous.late_file,))  # the files the previous release's view saw
        imported = httpx.post(f"{base}/indexes/restored/import", content=previous.export,
                              headers={"Content-Type": "application/gzip"}, timeout=300)
        restored = httpx.get(f"{base}/indexes/restored/documents", params={"limit": 100, "max_text_length": 100_000}).json()
    return Upgraded(data, after, late, [h["doc_id"] for h in hits], imported, restored)


def _served_as_before(before: dict, after: dict) -> None:
    """The views agree, key by key (a failure names what differs), but for the late file's one document in the
    conversations index's counts, and for fields this release adds."""
    assert sorted(after) == sorted(before)
    after = {key: as_served_before(after[key], before[key]) for key in after}
    counted = "versions conversations"
    for key in before:
        if key != counted:
            assert after[key] == before[key], key
    (was,), (now,) = before[counted].pop("versions"), after[counted].pop("versions")
    assert after[counted] == before[counted]
    assert (now.pop("documents"), now.pop("chunks")) == (was.pop("documents") + 1, was.pop("chunks") + 1)
    assert now == was


def test_every_document_version_session_file_and_store_is_served_as_before(previous, upgraded):
    before, after = previous.before, upgraded.after
    _served_as_before(copy.deepcopy(before), copy.deepcopy(after))
    assert after["versions kb"]["live_version"] == 2
    assert [v["state"] for v in after["versions kb"]["versions"]] == ["retired", "live"]
    assert "kb-late" in [d["doc_id"] for d in after["documents kb"]]  # replayed from the journal
    assert formats.read_data_version(upgraded.data) == formats.DATA.current  # marked by the upgrade


def test_a_file_uploaded_as_the_previous_release_was_killed_is_ingested(previous, upgraded):
    assert upgraded.late["ingestion_status"] == "completed", upgraded.late
    assert upgraded.late_hits == [f"{previous.late_file}-0"]


def test_the_previous_release_export_imports(previous, upgraded):
    assert upgraded.imported.status_code == 201, upgraded.imported.text
    assert upgraded.imported.json()["vectors"] == "reused"
    assert upgraded.restored["documents"] == previous.before["documents kb"]


class Crash(Exception):
    pass


def _crash(*_args, **_kwargs):
    raise Crash("the process dies here")


def _crash_on_marker(real):
    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == formats.MARKER:
            raise Crash("the process dies before the marker's rename")
        return real(src, dst, *args, **kwargs)

    return replace


STEPS = ["in the upgrade's step, before its marker", "marker written aside, before its rename",
         "marker renamed, before the folder's fsync"]


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_each_step_of_the_upgrade_loses_nothing(previous, embedder, tmp_path, monkeypatch, step):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import borrowed, serve_engine

    data = tmp_path / "data"
    shutil.copytree(previous.data, data)
    settings = EngineSettings(data_dir=data)
    if step == STEPS[0]:
        monkeypatch.setitem(formats.UPGRADES, 0, _crash)
    elif step == STEPS[1]:
        monkeypatch.setattr(formats.os, "replace", _crash_on_marker(os.replace))
    else:
        monkeypatch.setattr(formats, "_fsync_dir", _crash)
    app = create_app(settings)

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with borrowed(embedder) as own, pytest.raises(Crash):
        app.state.embedder = own
        asyncio.run(start())
    monkeypatch.undo()
    assert formats.marker_path(data).exists() == (step == STEPS[2])

    with serve_engine(create_app(EngineSettings(data_dir=data)), embedder) as base:
        assert _wait_ingested(base, previous.late_file)["ingestion_status"] == "completed"
        after = view(base, previous.seeded, skip=(previous.late_file,))
    assert formats.read_data_version(data) == formats.DATA.current
    _served_as_before(copy.deepcopy(previous.before), after)


def test_this_engine_refuses_a_folder_a_newer_engine_wrote_and_writes_nothing(upgraded, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(upgraded.data, data)  # stopped cleanly by this engine: snapshots, sessions checkpointed
    marker = formats.marker_path(data)
    newer = {"format": formats.DATA.name, "version": formats.DATA.current + 1, "engine": "9.0.0"}
    marker.write_text(json.dumps(newer))
    out = refused_start(data)
    assert f"refusing to start: {marker} holds data folder format version {formats.DATA.current + 1} (written by " \
           f"ragengine 9.0.0); this engine (ragengine" in out
    assert f"reads data folder formats up to version {formats.DATA.current}" in out

    formats.write_marker(data, formats.DATA.current)
    with sqlite3.connect(data / "sessions.db") as db:  # a migration this engine does not have
        db.execute("UPDATE alembic_version SET version_num = '0099'")
    db.close()
    out = refused_start(data)
    assert f"the session store's database {data / 'sessions.db'} is at schema revision '0099', which this engine" in out
    newest = formats.known_revisions(MIGRATIONS)[-1]  # this engine's newest migration, whatever it is
    assert f"it migrates up to revision {newest!r}" in out

