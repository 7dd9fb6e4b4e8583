"""The version book's decisions (``ragengine.versions.book``, pure) and the export format's checks
(``ragengine.versions.archive``): every damaged, truncated or foreign file is refused."""

from __future__ import annotations

import asyncio
import json
import zlib

import numpy as np
import pytest

from ragengine.errors import BadRequest, Conflict
from ragengine.versions import archive
from ragengine.versions import book as bk

CHUNKING = {"chunk_size": 254}


def _built(keep: int = 1) -> bk.Book:
    book = bk.new_book("kb", "a", 4, CHUNKING, 1.0)
    book = bk.start_reindex(book, "b", 8, CHUNKING, "j1", 2.0)
    book = bk.claim(book, "j1", "me", 3.0, 30.0)
    assert book is not None
    swapped = bk.swap(book, "j1", "me", 4.0, keep)
    assert swapped is not None
    return swapped[0]


def test_a_new_index_is_version_1_under_its_own_name():
    book = bk.new_book("kb", "a", 4, CHUNKING, 1.0)
    assert (book.live, book.live_version.physical, book.live_version.state) == (1, "kb", bk.LIVE)
    assert [v.version for v in book.write_targets()] == [1]


def test_a_build_gets_writes_and_swaps_in_one_step_keeping_the_old_version():
    book = bk.start_reindex(bk.new_book("kb", "a", 4, CHUNKING, 1.0), "b", 8, CHUNKING, "j1", 2.0)
    target = book.version(2)
    assert (target.physical, target.state, target.dim, target.model) == ("kb/v2", bk.BUILDING, 8, "b")
    assert [v.version for v in book.write_targets()] == [1, 2]
    assert book.models() == {"a", "b"}
    with pytest.raises(Conflict, match="already has a reindex"):
        bk.start_reindex(book, "c", 8, CHUNKING, "j2", 2.5)
    assert bk.swap(book, "j1", "me", 3.0, 1) is None  # nobody claimed it: not this owner's
    after = _built()
    assert after.live == 2 and after.version(1).state == bk.RETIRED and after.version(2).state == bk.LIVE
    assert after.job is not None and after.job.state == bk.SUCCEEDED
    assert [v.version for v in after.write_targets()] == [2]


def test_retention_keeps_the_most_recently_live_versions():
    book = _built(keep=1)
    book = bk.start_reindex(book, "c", 8, CHUNKING, "j2", 5.0)
    book = bk.claim(book, "j2", "me", 5.0, 30.0)
    assert book is not None
    result = bk.swap(book, "j2", "me", 6.0, 1)
    assert result is not None
    book, dropped = result
    assert [v.version for v in dropped] == [1]  # v2 was live more recently
    assert sorted(v.version for v in book.versions) == [2, 3]
    result = bk.swap(bk.claim(bk.start_activate(book, 2, "j3", 7.0), "j3", "me", 7.0, 30.0), "j3", "me", 8.0, 0)  # type: ignore[arg-type]
    assert result is not None and [v.version for v in result[1]] == [3] and result[0].live == 2


def test_activate_refuses_what_cannot_serve():
    book = _built()
    with pytest.raises(BadRequest, match="already live"):
        bk.start_activate(book, 2, "x", 5.0)
    building = bk.start_reindex(book, "c", 8, CHUNKING, "j2", 5.0)
    with pytest.raises(Conflict, match="building"):
        bk.start_activate(building, 3, "x", 6.0)
    activating = bk.start_activate(book, 1, "j3", 5.0)
    assert [v.version for v in activating.write_targets()] == [2, 1]  # the rollback target gets writes meanwhile


def test_a_lease_is_held_until_it_runs_out():
    book = bk.start_reindex(bk.new_book("kb", "a", 4, CHUNKING, 1.0), "b", 8, CHUNKING, "j1", 2.0)
    held = bk.claim(book, "j1", "r1", 10.0, 30.0)
    assert held is not None
    assert bk.claim(held, "j1", "r2", 20.0, 30.0) is None  # r1's lease runs until 40
    assert bk.progress(held, "j1", "r2", 1, 2, "", 20.0, 30.0) is None
    taken = bk.claim(held, "j1", "r2", 41.0, 30.0)
    assert taken is not None and taken.job is not None and taken.job.owner == "r2"
    assert bk.progress(taken, "j1", "r1", 1, 2, "", 42.0, 30.0) is None  # r1 learns it lost the job


def test_cancel_drops_a_half_built_version():
    book = bk.start_reindex(bk.new_book("kb", "a", 4, CHUNKING, 1.0), "b", 8, CHUNKING, "j1", 2.0)
    book, dropped = bk.cancel(book, "superseded", 3.0)
    assert [v.physical for v in dropped] == ["kb/v2"] and [v.version for v in book.versions] == [1]
    assert book.job is not None and book.job.state == bk.JOB_FAILED and book.job.message == "superseded"


def test_a_target_is_followed_once_and_an_older_one_never_undoes_a_newer():
    book = bk.new_book("kb", "a", 4, CHUNKING, 1.0)
    assert bk.follows_target(book, "b", 3)
    book = bk.follow_target(book, "b", 3)
    assert not bk.follows_target(book, "b", 3)  # followed (even if its re-index failed): no retry loop
    assert not bk.follows_target(book, "a", 2)  # a replica whose ConfigMap is older
    assert bk.follows_target(book, "a", 4)  # a newer spec generation, even back to an older model
    by_env = bk.follow_target(bk.new_book("kb", "a", 4, CHUNKING, 1.0), "a", None)
    assert not bk.follows_target(by_env, "a", None) and bk.follows_target(by_env, "b", None)


def test_a_book_round_trips_through_json():
    book = _built()
    assert bk.Book.from_dict(json.loads(json.dumps(book.to_dict()))) == book


# -- the export format -----------------------------------------------------------------------------
def _export(docs: int = 3, version: int | str = archive.VERSION) -> bytes:
    head = archive.header("kb", CHUNKING, {"key": "m", "model": "m", "url": None, "dim": 4}, 1.0)
    head["version"] = version
    rng = np.random.default_rng(0)
    batch = [{"id": f"d{i}", "text": f"text {i}", "meta": {"i": i}, "spans": [[0, 6]],
              "vectors": rng.standard_normal((1, 4)).astype(np.float32)} for i in range(docs)]

    async def batches():
        yield batch

    async def collect() -> bytes:
        return b"".join([part async for part in archive.encode(head, batches())])

    return asyncio.run(collect())


def _read(data: bytes, step: int = 7) -> tuple[list[dict], dict]:
    reader = archive.ArchiveReader()
    docs = []
    for i in range(0, len(data), step):
        docs += reader.feed(data[i:i + step])
    return docs, reader.finish()


def test_an_export_reads_back_bit_for_bit():
    data = _export()
    import gzip

    assert gzip.decompress(data).count(b"\n") == 5  # a standard gzip file: header, 3 documents, trailer
    docs, trailer = _read(data)
    assert [d["id"] for d in docs] == ["d0", "d1", "d2"] and trailer["documents"] == 3
    rng = np.random.default_rng(0)
    for doc in docs:
        assert doc["vectors"].tobytes() == rng.standard_normal((1, 4)).astype(np.float32).tobytes()


def test_every_flipped_bit_is_refused_or_changes_nothing():
    """Every bit of the file is covered (gzip header CRC16, deflate's structure, CRC32 and length, and the
    content's SHA-256): a flip is refused, except in the padding bits after deflate's last block, which no
    reader uses (the content then reads back bit for bit the same)."""
    data = _export(docs=2)
    original = _read(data)
    accepted = []
    for i in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[i] ^= 1 << bit
            try:
                got = _read(bytes(damaged))
            except archive.ArchiveError:
                continue
            accepted.append(i)
            assert [d["id"] for d in got[0]] == [d["id"] for d in original[0]]
            assert all(a["vectors"].tobytes() == b["vectors"].tobytes() for a, b in zip(got[0], original[0], strict=True))
            assert got[1] == original[1]
    assert set(accepted) <= {len(data) - 9}  # the last byte of the deflate stream, before gzip's trailer


def test_every_truncation_is_refused():
    data = _export(docs=2)
    for n in range(len(data)):
        with pytest.raises(archive.ArchiveError, match=r"truncated|damaged|ends"):
            _read(data[:n])


def test_other_versions_formats_and_trailing_data_are_refused():
    with pytest.raises(archive.ArchiveError, match=r"format version 2; this engine \(ragengine \S+\) reads index export "
                                                   r"formats up to version 1: import it into an engine at least as new"):
        _read(_export(version=2))
    with pytest.raises(archive.ArchiveError, match="version '1' is not a version number"):
        _read(_export(version="1"))
    with pytest.raises(archive.ArchiveError, match="after the end"):
        _read(_export() + b"\x1f\x8b")
    foreign = zlib.compressobj(6, zlib.DEFLATED, 31)
    with pytest.raises(archive.ArchiveError, match="not a ragengine index export"):
        _read(foreign.compress(b'{"hello": "world"}\n') + foreign.flush())
    with pytest.raises(archive.ArchiveError, match="damaged or not a ragengine export"):
        _read(b"PK\x03\x04 a zip file")


def test_a_gated_build_is_rejected_kept_activatable_and_dropped_before_rollback_targets():
    verdict = {"passed": False, "message": "version 3 rejected: mrr@10 0.4000 is below the minimum 0.5000"}
    book = _built()  # 2 live, 1 retired
    book = bk.start_reindex(book, "c", 8, CHUNKING, "j2", 5.0, gate={"metric": "mrr@10", "minimum": 0.5})
    assert book.job is not None and book.job.gate == {"metric": "mrr@10", "minimum": 0.5}
    assert bk.reject(book, "j2", "someone-else", 6.0, 1, verdict) is None  # not this owner's job
    claimed = bk.claim(book, "j2", "me", 6.0, 30.0)
    assert claimed is not None
    rejected, dropped = bk.reject(claimed, "j2", "me", 7.0, 1, verdict)  # type: ignore[misc]
    assert rejected.live == 2 and rejected.version(3).state == bk.REJECTED and dropped == []
    assert rejected.version(3).evaluation == verdict and rejected.job.state == bk.JOB_REJECTED  # type: ignore[union-attr]
    assert rejected.job.message == verdict["message"]  # type: ignore[union-attr]
    assert [v.version for v in rejected.write_targets()] == [2]  # a rejected version takes no writes
    # the next swap keeps the rollback target (2, just retired; keep=1) and drops the rejected version
    again = bk.claim(bk.start_reindex(rejected, "d", 8, CHUNKING, "j3", 8.0), "j3", "me", 8.0, 30.0)
    swapped, gone = bk.swap(again, "j3", "me", 9.0, 1)  # type: ignore[arg-type, misc]
    assert swapped.live == 4 and sorted(v.version for v in gone) == [1, 3]
    assert {v.version: v.state for v in swapped.versions} == {2: bk.RETIRED, 4: bk.LIVE}
    # an admin may activate a rejected version
    activated = bk.start_activate(rejected, 3, "j4", 10.0)
    assert activated.job is not None and activated.job.kind == bk.ACTIVATE and activated.job.version == 3
