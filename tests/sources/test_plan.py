"""The sync planner (pure): stable ids, hashes without the revision, deletes scoped to the source."""

from __future__ import annotations

from ragengine_operator.sources.plan import SourceFile, doc_id, documents, legacy_hash, plan_sync


def _indexed(source: str, revision: str, files: list[SourceFile], extra=None) -> dict[str, dict]:
    return {d.doc_id: d.metadata for d in documents(source, revision, files, extra)}


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


def test_a_kept_path_whose_own_metadata_changed_is_relabelled_without_its_text():
    files = [SourceFile("hr/a.md", "alpha", {"etag": "e1"}), SourceFile("b.md", "beta", {"etag": "e2"})]
    held = _indexed("s3", "r1", files, {"acl": ["group:staff"], "team": "ops"})
    rules = {"hr/a.md": {"acl": ["group:hr"]}, "b.md": {"acl": ["group:staff"], "team": "ops"}}
    plan = plan_sync("s3", "r2", [], held, rules.get, kept=["hr/a.md", "b.md"])
    assert [k for k, _ in plan.relabel] == ["s3:hr/a.md"] and plan.unchanged == 1 and not plan.delete
    meta = dict(plan.relabel)["s3:hr/a.md"]
    assert meta["acl"] == ["group:hr"] and "team" not in meta and meta["etag"] == "e1" and meta["revision"] == "r1"
    # the relabelled hash is the one a later read of the same text computes: nothing to write then
    again = plan_sync("s3", "r3", [files[0]], {"s3:hr/a.md": meta}, rules.get)
    assert again.empty and again.unchanged == 1


def test_a_kept_path_no_rule_matches_any_more_is_deleted():
    files = [SourceFile("hr/a.md", "alpha")]
    plan = plan_sync("s3", "r2", [], _indexed("s3", "r1", files), lambda path: None, kept=["hr/a.md"])
    assert plan.delete == ["s3:hr/a.md"] and not plan.relabel


def test_documents_written_before_text_hashes_stay_unchanged():
    files = [SourceFile("a.md", "alpha", {"format": "markdown"})]
    old = {"format": "markdown", "source": "docs", "path": "a.md", "revision": "c1"}
    old["source_hash"] = legacy_hash("alpha", old)
    plan = plan_sync("docs", "c2", files, {"docs:a.md": old})
    assert plan.empty and plan.unchanged == 1
