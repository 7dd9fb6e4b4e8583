"""A crash at each step of a snapshot, made deterministic: the step fails, the process "dies" (the
registry is dropped without closing), and a new registry restores from the same data directory.

Steps of ``Durability.snapshot``: (1) the temporary folder is written, then the current snapshot is
renamed to ``snapshot.old``; (2) the temporary folder is renamed to ``snapshot``; (3) the journal is
truncated. Whatever step fails, the restart must hold every acknowledged document exactly once.
"""

from __future__ import annotations

import os

import pytest

from ragengine.index import snapshot as snapshot_module
from ragengine.index.registry import IndexRegistry
from ragengine.settings import EngineSettings

FIRST = [{"doc_id": f"a{i}", "text": f"First batch document {i} about journals."} for i in range(3)]
SECOND = [{"doc_id": f"b{i}", "text": f"Second batch document {i} about snapshots."} for i in range(3)]


class Crash(Exception):
    pass


def _fail_on_call(n: int, real):
    calls = {"n": 0}

    def replace(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise Crash(f"crash at os.replace call {n}")
        return real(*args, **kwargs)

    return replace


async def _restart(settings: EngineSettings, embedder) -> IndexRegistry:
    registry = IndexRegistry(settings, embedder)
    await registry.start()
    return registry


async def _written(tmp_path, embedder) -> tuple[EngineSettings, IndexRegistry]:
    settings = EngineSettings(data_dir=tmp_path / "data", snapshot_journal_bytes=0)
    registry = await _restart(settings, embedder)
    await registry.add_documents("kb", FIRST)
    await registry.durability.snapshot(registry.get("kb"))  # a complete first snapshot
    await registry.add_documents("kb", SECOND)  # acknowledged: in the journal only
    return settings, registry


async def _snapshot_crashes(registry: IndexRegistry) -> None:
    """The snapshot dies mid-way, and the process with it: the kernel drops its lock on the folder."""
    with pytest.raises(Crash):
        await registry.durability.snapshot(registry.get("kb"))
    registry.durability.writer.release()


async def _assert_everything_once(settings: EngineSettings, embedder) -> None:
    registry = await _restart(settings, embedder)
    state = registry.get("kb")
    assert sorted(state.docs) == sorted(d["doc_id"] for d in FIRST + SECOND)
    assert state.n_chunks == len(FIRST + SECOND)  # one chunk each: nothing replayed twice
    hits = await registry.retrieve("kb", "Second batch document 2 about snapshots.", 1)
    assert hits[0].doc_id == "b2"
    assert registry.status()["corrupt"] == {}
    await registry.close()


@pytest.mark.parametrize("step,call", [("before renaming the old snapshot aside", 1),
                                       ("after renaming the old snapshot, before the new one is in place", 2)])
async def test_crash_during_the_renames(tmp_path, embedder, monkeypatch, step, call):
    settings, registry = await _written(tmp_path, embedder)
    monkeypatch.setattr(snapshot_module.os, "replace", _fail_on_call(call, os.replace))
    await _snapshot_crashes(registry)
    monkeypatch.undo()
    index_dir = tmp_path / "data" / "indexes" / "kb"
    assert (index_dir / "snapshot.tmp").is_dir()  # the temporary folder was written before the crash
    if call == 2:
        assert not (index_dir / "snapshot").exists() and (index_dir / "snapshot.old").is_dir()
    await _assert_everything_once(settings, embedder)


async def test_crash_after_the_rename_before_the_journal_is_truncated(tmp_path, embedder, monkeypatch):
    settings, registry = await _written(tmp_path, embedder)
    journal = registry.get("kb").journal
    assert journal.size > 0

    def crash() -> None:
        raise Crash("crash before the journal is truncated")

    monkeypatch.setattr(journal, "reset", crash)
    await _snapshot_crashes(registry)
    index_dir = tmp_path / "data" / "indexes" / "kb"
    assert (index_dir / "snapshot").is_dir() and journal.size > 0  # new snapshot and the full journal both
    await _assert_everything_once(settings, embedder)


async def test_a_snapshot_after_a_crash_cleans_up_and_succeeds(tmp_path, embedder, monkeypatch):
    settings, registry = await _written(tmp_path, embedder)
    monkeypatch.setattr(snapshot_module.os, "replace", _fail_on_call(1, os.replace))
    await _snapshot_crashes(registry)
    monkeypatch.undo()
    restarted = await _restart(settings, embedder)
    await restarted.durability.snapshot(restarted.get("kb"))
    index_dir = tmp_path / "data" / "indexes" / "kb"
    assert not (index_dir / "snapshot.tmp").exists() and not (index_dir / "snapshot.old").exists()
    assert restarted.get("kb").journal.size == 0
    await restarted.close()
    await _assert_everything_once(settings, embedder)
