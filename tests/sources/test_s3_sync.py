"""S3 sources end to end: a real engine (FAISS), the real sync code and a real S3 server (versitygw, built
from its Go module with the control plane): objects added, changed and deleted reach the index, unchanged
objects are not read again (their ETag), the listing is paged, the caps hold, failures name their cause."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from ragengine_operator.sources import s3 as s3_reader
from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.sync import SyncResult, fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.sources.test_git_sync import LOOPBACK, embedded, engine, held  # noqa: F401 - the engine fixture
from tests.support.s3_server import S3Server, s3_server


@pytest.fixture
def s3(tmp_path) -> S3Server:
    with s3_server(tmp_path) as server:
        server.make_bucket("team-docs")
        yield server


def _source(server: S3Server, **extra) -> Source:
    spec = {"endpoint": server.base, "bucket": "team-docs", "prefix": "kb/", "secretRef": {"name": "s3"},
            **extra.pop("s3", {})}
    return Source.model_validate({"name": "lake", "index": "docs", "s3": spec, **extra})


def sync(source: Source, engine: str, secret: dict | None, previous: str | None = None,  # noqa: F811
         held_hook: Callable[[], None] | None = None) -> SyncResult:
    client = EngineClient(engine)

    def held_docs():
        if held_hook:
            held_hook()
        return client.documents_of(source.index_name, source.name)

    try:
        return sync_source(source, client, lambda: fetch(source, cache=Path("unused"), secret=secret,
                                                         previous_revision=previous, previous_validators=None,
                                                         policy=LOOPBACK, held=held_docs), previous)
    finally:
        client.close()


def test_objects_added_changed_and_deleted_reach_the_index_and_unchanged_ones_are_not_read(engine, s3):  # noqa: F811
    s3.put("team-docs", "kb/guide.md", "# Guide\n\nThe lake holds the exports of the wiki.\n")
    s3.put("team-docs", "kb/runbooks/pump.txt", "Restart the pump with valve V-7.")
    s3.put("team-docs", "kb/site/page.html", "<html><body><h1>Page</h1><p>Hello there.</p></body></html>")
    s3.put("team-docs", "kb/logo.png", b"\x89PNG\r\n\x1a\n\x00\x00binary")  # an image: OCR finds no text
    s3.put("team-docs", "kb/data.bin", b"\x00\x01")  # skipped by its name: never downloaded
    s3.put("team-docs", "kb/notes/Ünïcode name+plus (1).md", "# Odd name\n\nKeys are signed as S3 encodes them.\n")
    s3.put("team-docs", "other/outside.md", "# Outside the prefix\n")
    source = _source(s3)
    first = sync(source, engine, s3.secret)
    assert first.ok, first.message
    assert first.documents == 4 and first.skipped == 2 and first.revision.startswith("sha256:"), first.message
    docs = held(engine)
    assert set(docs) == {"lake:guide.md", "lake:runbooks/pump.txt", "lake:site/page.html",
                         "lake:notes/Ünïcode name+plus (1).md"}
    meta = docs["lake:guide.md"]["metadata"]
    assert meta["source"] == "lake" and meta["path"] == "guide.md" and meta["etag"] and meta["revision"] == first.revision
    assert docs["lake:site/page.html"]["text"] == "# Page\n\nHello there."  # the heading as Markdown

    before = embedded(engine)
    again = sync(source, engine, s3.secret, previous=first.revision)  # the listing did not move: nothing read
    assert again.ok and again.message == "up to date", again.message

    s3.put("team-docs", "kb/guide.md", "# Guide\n\nThe lake holds the exports of the wiki, and tickets.\n")
    s3.put("team-docs", "kb/new.md", "# New\n\nA page dropped by another pipeline.\n")
    s3.delete("team-docs", "kb/runbooks/pump.txt")
    read_before = len(s3.gets)
    second = sync(source, engine, s3.secret, previous=first.revision)
    assert second.ok and second.revision != first.revision, second.message
    assert "1 added, 1 updated, 1 deleted, 2 unchanged" in second.message, second.message
    # page.html is kept by its ETag; logo.png, skipped last time (no text), has no document to compare with
    assert sorted(s3.gets[read_before:]) == ["team-docs/kb/guide.md", "team-docs/kb/logo.png", "team-docs/kb/new.md"]
    docs = held(engine)
    assert set(docs) == {"lake:guide.md", "lake:new.md", "lake:site/page.html", "lake:notes/Ünïcode name+plus (1).md"}
    assert "and tickets" in docs["lake:guide.md"]["text"]
    assert embedded(engine) > before


def test_a_rule_change_relabels_objects_without_reading_or_embedding_them(engine, s3):  # noqa: F811
    s3.put("team-docs", "kb/hr/pay.md", "# Pay\n\nSalaries are paid on the 25th.\n")
    s3.put("team-docs", "kb/runbooks/pump.md", "# Pump\n\nRestart it with valve V-7.\n")
    rules = [{"paths": ["hr/**"], "acl": ["group:hr"]}, {"paths": ["**"], "acl": ["group:staff"]}]
    first = sync(_source(s3, aclRules=rules), engine, s3.secret)
    assert first.ok and first.documents == 2, first.message
    assert held(engine)["lake:hr/pay.md"]["metadata"]["acl"] == ["group:hr"]
    before, read_before = embedded(engine), len(s3.gets)
    rules[0]["acl"] = ["group:hr", "group:finance"]
    edited = sync(_source(s3, aclRules=rules), engine, s3.secret)  # an edited spec: known revision dropped
    assert edited.ok and "1 relabelled, 1 unchanged" in edited.message, edited.message
    assert s3.gets[read_before:] == [] and embedded(engine) == before  # nothing read, nothing embedded
    assert held(engine)["lake:hr/pay.md"]["metadata"]["acl"] == ["group:hr", "group:finance"]
    assert held(engine)["lake:hr/pay.md"]["text"].startswith("# Pay")


def test_the_listing_is_paged_and_the_caps_hold_before_anything_is_read(engine, s3, monkeypatch):  # noqa: F811
    for i in range(7):
        s3.put("team-docs", f"kb/note-{i}.txt", f"Note number {i}.")
    monkeypatch.setattr(s3_reader, "PAGE", 2)  # 4 pages of the real server's listing
    lists_before = len(s3.lists)
    result = sync(_source(s3), engine, s3.secret)
    assert result.ok and result.documents == 7, result.message
    assert len(s3.lists) - lists_before == 4
    gets_before = len(s3.gets)
    capped = sync(_source(s3, maxFiles=5), engine, s3.secret)
    assert not capped.ok and "more than 5 objects" in capped.message and "maxFiles" in capped.message, capped.message
    sized = sync(_source(s3, maxSize="40"), engine, s3.secret)
    assert not sized.ok and "more than 40 bytes" in sized.message, sized.message
    assert s3.gets[gets_before:] == []  # refused from the listing: no object read
    assert len(held(engine)) == 7  # and nothing indexed was removed


def test_an_object_replaced_or_deleted_during_a_sync_is_never_half_indexed(engine, s3):  # noqa: F811
    s3.put("team-docs", "kb/a.md", "# A\n\nVersion one.\n")
    s3.put("team-docs", "kb/b.md", "# B\n\nStill here.\n")

    def meanwhile() -> None:  # between the listing and the reads
        s3.put("team-docs", "kb/a.md", "# A\n\nVersion two, written during the sync.\n")
        s3.delete("team-docs", "kb/b.md")

    first = sync(_source(s3), engine, s3.secret, held_hook=meanwhile)
    assert first.ok and "b.md: deleted during the sync" in first.message, first.message
    docs = held(engine)
    assert set(docs) == {"lake:a.md"} and "Version two" in docs["lake:a.md"]["text"]
    gets_before = len(s3.gets)
    second = sync(_source(s3), engine, s3.secret, previous=first.revision)  # a.md's ETag is the one indexed
    assert second.ok and second.written == 0 and s3.gets[gets_before:] == [], second.message
    assert "Version two" in held(engine)["lake:a.md"]["text"]


def test_refused_credentials_a_missing_bucket_and_a_skewed_clock_are_named(engine, s3, monkeypatch):  # noqa: F811
    s3.put("team-docs", "kb/a.md", "# A\n\nAlpha.\n")
    wrong = sync(_source(s3), engine, {**s3.secret, "secretAccessKey": "not-the-key"})
    assert not wrong.ok and "refused the credentials (SignatureDoesNotMatch" in wrong.message, wrong.message
    unknown = sync(_source(s3), engine, {**s3.secret, "accessKeyId": "AKIDNOBODY"})
    assert not unknown.ok and "refused the credentials" in unknown.message, unknown.message
    incomplete = sync(_source(s3), engine, {"accessKeyId": "x"})
    assert not incomplete.ok and "needs the keys accessKeyId and secretAccessKey" in incomplete.message
    missing = sync(_source(s3, s3={"bucket": "no-such-bucket"}), engine, s3.secret)
    assert not missing.ok and "no-such-bucket" in missing.message and "no such bucket" in missing.message, missing.message

    class Skewed(dt.datetime):  # the signer's clock an hour ahead: the server refuses the signature's time
        @classmethod
        def now(cls, tz=None):
            return dt.datetime.now(tz) + dt.timedelta(hours=1)

    import httpx_auth._aws as signer

    monkeypatch.setattr(signer, "datetime", SimpleNamespace(datetime=Skewed, timezone=dt.timezone))
    skewed = sync(_source(s3), engine, s3.secret)
    assert not skewed.ok and "RequestTimeTooSkewed" in skewed.message and "clock" in skewed.message, skewed.message
    assert httpx.get(f"{engine}/indexes").json() == []  # the failed syncs wrote nothing
