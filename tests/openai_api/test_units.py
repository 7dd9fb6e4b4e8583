"""The pure parts: citation markers taken out of streamed text, attribution, OpenAI's cursor pages,
chunking strategies, the objects' mapping; and the catalog's jobs on a real SQLite database."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from datetime import timedelta

import pytest

from ragengine.conversations.models import utcnow
from ragengine.conversations.store import SessionStore
from ragengine.index.types import ChunkingConfig
from ragengine.protocol.paging import cursor_page
from ragengine.responses.citations import CitationStripper, Source, annotate, attribute, citations
from ragengine.vectorstores.catalog import Catalog
from ragengine.vectorstores.objects import StoreRecord, StoreStats, effective_chunking, vector_store_object

SOURCES = [Source(1, "file_a", "a.txt", ("Paris is the capital of France.",)),
           Source(2, "file_b", "b.txt", ("Berlin is the capital of Germany.",))]


def strip(text: str, numbers=frozenset({1, 2}), pieces: list[int] | None = None) -> CitationStripper:
    stripper = CitationStripper(set(numbers))
    cuts = [0, *(pieces or []), len(text)]
    shown = "".join(stripper.feed(text[a:b]) for a, b in itertools.pairwise(cuts)) + stripper.finish()
    assert shown == stripper.text
    return stripper


@pytest.mark.parametrize("seed", range(20))
def test_markers_come_out_however_the_stream_is_cut(seed):
    text = "Paris is the capital [1]. Berlin too [2][1], see [note] and [7] or x[1, 2]. Done [ 2 ]"
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, 20)))
    stripper = strip(text, pieces=cuts)
    clean = "Paris is the capital. Berlin too, see [note] and [7] or x. Done"
    assert stripper.text == clean
    at = [clean.index("."), clean.index(","), clean.index(". Done"), len(clean)]  # where each marker stood
    assert stripper.marks == [(at[0], 1), (at[1], 2), (at[1], 1), (at[2], 1), (at[2], 2), (at[3], 2)]


def test_marker_like_text_that_is_not_a_marker_stays():
    assert strip("a [12345678901234567890123456 b", numbers={1}).text == "a [12345678901234567890123456 b"
    assert strip("ends with [1", numbers={1}).text == "ends with [1"
    assert strip("array[0] and [3]", numbers={1, 2}).text == "array[0] and [3]"


def test_annotations_from_markers_and_from_attribution():
    stripper = strip("Paris is the capital of France [1]. Berlin is Germany's [2].")
    found = citations(stripper, SOURCES)
    assert stripper.text == "Paris is the capital of France. Berlin is Germany's."
    assert [(a["file_id"], a["index"]) for a in found.annotations] == [("file_a", 30), ("file_b", 51)]
    assert found.cited == ["file_a", "file_b"]
    # no markers: each sentence goes to the file that supports it; unsupported sentences cite nothing
    text = "The capital of France is Paris. I like trains very much."
    assert attribute(text, SOURCES) == [(31, 1)]
    assert annotate([(5, 2), (5, 2)], SOURCES).annotations == [
        {"type": "file_citation", "file_id": "file_b", "filename": "b.txt", "index": 5}]


def test_cursor_page():
    items = [f"i{n}" for n in range(5)]  # oldest first

    def page(**kw):
        return cursor_page(items, lambda x: x, **{"limit": 2, "order": "asc", **kw})

    assert page() == (["i0", "i1"], True)
    assert page(after="i1") == (["i2", "i3"], True)
    assert page(after="i3") == (["i4"], False)
    assert page(order="desc") == (["i4", "i3"], True)
    assert page(order="desc", after="i3") == (["i2", "i1"], True)
    assert page(before="i3") == (["i1", "i2"], True)
    assert page(before="i1") == (["i0"], False)
    assert page(order="desc", before="i1") == (["i3", "i2"], True)
    with pytest.raises(KeyError):
        page(after="nope")


def test_chunking_strategies_resolve_against_the_index():
    index = ChunkingConfig(chunk_size=254, chunk_overlap=32)
    assert effective_chunking(None, index) == index
    assert effective_chunking({"type": "auto"}, index) == index
    small = effective_chunking({"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 40}},
                               index)
    assert (small.chunk_size, small.chunk_overlap) == (100, 40)
    big = effective_chunking({"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}},
                             index)
    assert (big.chunk_size, big.chunk_overlap) == (254, 127)  # the model's window, half of it overlapping


def test_vector_store_status_and_expiry():
    now = utcnow()
    record = StoreRecord("vs_1", None, None, {}, 2, now - timedelta(days=3), now - timedelta(days=3))
    assert vector_store_object(record, StoreStats(), now)["status"] == "expired"
    fresh = StoreRecord("vs_1", None, None, {}, None, now, now)
    busy = vector_store_object(fresh, StoreStats(Counter({"in_progress": 1, "completed": 2}), 10), now)
    assert (busy["status"], busy["name"], busy["file_counts"]["total"]) == ("in_progress", "vs_1", 3)


async def test_catalog_claims_each_job_once_and_cancel_stops_the_rest(tmp_path):
    sessions = SessionStore(f"sqlite:///{tmp_path / 's.db'}")
    sessions.create_tables()
    catalog = Catalog(sessions.engine)
    await catalog.create_store("vs_1")
    batch = await catalog.create_batch("vs_1", ["f1", "f2", "f3"])
    for fid in ("f1", "f2", "f3"):
        await catalog.attach("vs_1", fid, attributes={}, chunking={"type": "auto"}, batch_id=batch.id)
    first, second = await catalog.claim(30), await catalog.claim(30)
    assert {first.file_id, second.file_id} <= {"f1", "f2", "f3"} and first.file_id != second.file_id
    await catalog.cancel_batch("vs_1", batch.id)
    assert {f.file_id: f.status for f in await catalog.files("vs_1")} == {"f1": "cancelled", "f2": "cancelled",
                                                                           "f3": "cancelled"}
    assert await catalog.claim(30) is None  # nothing left to do
    assert not await catalog.held(first, status="completed")  # the worker learns its job is gone
    # a lease that ran out is taken again, by a new claim; the old holder's updates no longer apply
    await catalog.attach("vs_1", "f4", attributes={}, chunking={})
    stale = await catalog.claim(-1)  # a lease already over: as if its holder had died
    fresh = await catalog.claim(30)
    assert (stale.file_id, fresh.file_id, fresh.attempts) == ("f4", "f4", 2)
    assert not await catalog.held(stale, status="completed")
    assert await catalog.held(fresh, status="completed")
    sessions.close()
