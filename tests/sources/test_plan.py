"""The sync planner (pure): stable ids, hashes without the revision, deletes scoped to the source."""

from __future__ import annotations

from ragengine_operator.sources.plan import HASH_KEY, SourceFile, doc_id, documents, plan_sync


def _indexed(source: str, revision: str, files: list[SourceFile]) -> dict[str, str]:
    return {d.doc_id: d.metadata[HASH_KEY] for d in documents(source, revision, files)}


def test_first_sync_adds_everything_with_source_metadata():
    files = [SourceFile("a.md", "alpha", {"format": "markdown"}), SourceFile("b.txt", "beta")]
    plan = plan_sync("docs", "c1", files, {})
    assert [d.doc_id for d in plan.add] == ["docs:a.md", "docs:b.txt"] and not plan.update and not plan.delete
    meta = plan.add[0].metadata
    assert meta["source"] == "docs" and meta["path"] == "a.md" and meta["revision"] == "c1" and meta["format"] == "markdown"


def test_new_revision_with_same_content_writes_nothing():
    files = [SourceFile("a.md", "alpha"), SourceFile("b.txt", "beta")]
    plan = plan_sync("docs", "c2", files, _indexed("docs", "c1", files))
    assert plan.empty and plan.unchanged == 2


def test_change_rename_and_delete():
    old = [SourceFile("a.md", "alpha"), SourceFile("b.txt", "beta"), SourceFile("c.txt", "gamma")]
    new = [SourceFile("a.md", "alpha 2"), SourceFile("docs/b.txt", "beta")]  # a changed, b renamed, c deleted
    plan = plan_sync("docs", "c2", new, _indexed("docs", "c1", old))
    assert [d.doc_id for d in plan.update] == ["docs:a.md"]
    assert [d.doc_id for d in plan.add] == ["docs:docs/b.txt"]
    assert plan.delete == ["docs:b.txt", "docs:c.txt"]
    assert plan.update[0].metadata["revision"] == "c2"


def test_extra_metadata_is_part_of_the_content():
    files = [SourceFile("a.md", "alpha")]
    plan = plan_sync("docs", "c2", files, _indexed("docs", "c1", files), extra={"team": "ml"})
    assert [d.doc_id for d in plan.update] == ["docs:a.md"] and plan.update[0].metadata["team"] == "ml"


def test_long_paths_keep_ids_within_the_engine_limit_and_distinct():
    a, b = "x/" * 300 + "a.md", "y/" + "x/" * 300 + "a.md"
    assert len(doc_id("docs", a)) <= 512 and doc_id("docs", a) != doc_id("docs", b)


def test_paths_kept_unread_are_neither_deleted_nor_rewritten():
    files = [SourceFile("http://x/a", "alpha"), SourceFile("http://x/b", "beta")]
    plan = plan_sync("web", "r2", [SourceFile("http://x/b", "beta 2")], _indexed("web", "r1", files), kept=["http://x/a"])
    assert plan.delete == [] and [d.doc_id for d in plan.update] == ["web:http://x/b"] and plan.unchanged == 1
