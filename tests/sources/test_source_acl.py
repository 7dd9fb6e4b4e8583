"""``spec.sources[].acl``: every document of a source carries the source's document ACL, and a change of it
is a metadata-only update (no re-embedding); ``metadata.acl`` (a string, which would hide everything) is
refused in favour of the list."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.sync import fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.sources.test_git_sync import LOOPBACK, embedded, engine, held, run  # noqa: F401 - the engine fixture
from tests.sources.test_http_sync import TOKEN, site  # noqa: F401 - the site fixture


def _source(base: str, acl: list[str] | None) -> Source:
    return Source.model_validate({"name": "web", "index": "docs", "http": {"urls": [f"{base}/notes"]},
                                  "metadata": {"team": "ops"}, **({"acl": acl} if acl is not None else {})})


def _sync(source: Source, engine: str, tmp_path):  # noqa: F811
    client = EngineClient(engine)
    try:
        return sync_source(source, client, lambda: fetch(source, cache=tmp_path, secret={"token": TOKEN},
                                                         previous_revision=None, previous_validators=None,
                                                         policy=LOOPBACK))
    finally:
        client.close()


def test_a_sources_acl_is_on_every_document_and_follows_edits(engine, site, tmp_path):  # noqa: F811
    base, _pages, _hits = site
    first = _sync(_source(base, ["group:ops", "user:shop/frontend"]), engine, tmp_path)
    assert first.ok, first.message
    meta = held(engine)[f"web:{base}/notes"]["metadata"]
    assert meta["acl"] == ["group:ops", "user:shop/frontend"] and meta["team"] == "ops"
    before = embedded(engine)
    changed = _sync(_source(base, ["group:dev"]), engine, tmp_path)
    assert changed.ok and "1 updated" in changed.message, changed.message
    assert held(engine)[f"web:{base}/notes"]["metadata"]["acl"] == ["group:dev"]
    assert embedded(engine) == before  # the text did not change: its vectors were kept
    dropped = _sync(_source(base, None), engine, tmp_path)
    assert dropped.ok and "acl" not in held(engine)[f"web:{base}/notes"]["metadata"]


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"metadata": {"acl": "group:ops"}}, "set the source's acl list"),
    ({"acl": ["ops"]}, "String should match pattern"),
    ({"acl": ["group:"]}, "String should match pattern"),
])
def test_a_malformed_source_acl_is_refused(extra, fragment):
    with pytest.raises(ValidationError, match=fragment):
        Source.model_validate({"name": "web", "http": {"urls": ["https://example.com/x"]}, **extra})


def _syncer():
    from types import SimpleNamespace

    from ragengine_operator.settings import OperatorSettings
    from ragengine_operator.syncer.runner import SourceSyncer

    settings = OperatorSettings(sources_egress_allow=["127.0.0.1/32"])
    return SourceSyncer(SimpleNamespace(settings=settings))  # type: ignore[arg-type]  # prepare reads settings only


def _through_worker(syncer, source: Source, state, engine: str, tmp_path):  # noqa: F811
    """One sync as the operator runs it: the request its syncer prepares, then the worker's run."""
    from ragengine_operator.sources import worker
    from ragengine_operator.sources.status import after_sync
    from ragengine_operator.syncer.runner import Target

    target = Target("ns", "rag", "uid", (source,), (), True, None)
    prepared = syncer.prepare(target, source, state)
    from dataclasses import replace as with_engine

    request = with_engine(prepared.request, engine_url=engine)
    result = worker.run(request, {}, None, None, tmp_path)
    return result, after_sync(source, state, result, 1.0)


def test_an_edited_acl_reaches_the_documents_of_an_unchanged_revision(engine, tmp_path):  # noqa: F811
    """The defect: an edited acl (or aclRules) was answered "up to date" while the commit stayed the same (the
    operator sent the last revision as known), so documents kept the old ACL until the next commit."""
    from tests.support.git_server import Repo, git_http_server

    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("hr/pay.md", "# Pay\n\nSalaries are paid on the 25th.\n")
    repo.write("runbooks/restart.md", "# Restart\n\nRestart the pump with valve V-7.\n")
    repo.commit("first")
    syncer = _syncer()
    with git_http_server(root) as base:
        spec = {"name": "kb", "index": "docs", "git": {"url": f"{base}/docs.git"}}
        first, state = _through_worker(syncer, Source.model_validate({**spec, "acl": ["group:staff"]}), None, engine,
                                       tmp_path / "a")
        assert first.ok and first.written == 2, first.message
        before = embedded(engine)
        rules = Source.model_validate({**spec, "aclRules": [{"paths": ["hr/**"], "acl": ["group:hr"]},
                                                            {"paths": ["**"], "acl": ["group:staff", "group:sre"]}]})
        edited, state = _through_worker(syncer, rules, state, engine, tmp_path / "b")
        assert edited.ok and edited.written == 2 and "2 updated" in edited.message, edited.message
        docs = held(engine)
        assert docs["kb:hr/pay.md"]["metadata"]["acl"] == ["group:hr"]
        assert docs["kb:runbooks/restart.md"]["metadata"]["acl"] == ["group:staff", "group:sre"]
        assert embedded(engine) == before  # metadata only: nothing embedded
        again, state = _through_worker(syncer, rules, state, engine, tmp_path / "c")
        assert again.ok and again.message == "up to date", again.message  # the same spec and commit: nothing read


def test_a_path_no_rule_matches_is_refused_and_reported(engine, tmp_path):  # noqa: F811
    from tests.support.git_server import Repo, git_http_server

    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("hr/pay.md", "# Pay\n\nSalaries are paid on the 25th.\n")
    repo.write("notes.md", "# Notes\n\nNobody classified this page.\n")
    repo.commit("first")
    with git_http_server(root) as base:
        everyone = Source.model_validate({"name": "kb", "index": "docs", "git": {"url": f"{base}/docs.git"}})
        assert run(everyone, engine, tmp_path, None).ok
        assert set(held(engine)) == {"kb:hr/pay.md", "kb:notes.md"}
        rules = Source.model_validate({"name": "kb", "index": "docs", "git": {"url": f"{base}/docs.git"},
                                       "aclRules": [{"paths": ["hr/"], "acl": ["group:hr"]}]})
        result = run(rules, engine, tmp_path, None)
        assert result.ok and result.skipped == 1, result.message
        assert "notes.md: no aclRules entry matches this path" in result.message, result.message
        assert set(held(engine)) == {"kb:hr/pay.md"}  # the document an earlier spec let in is gone: fail closed
        assert held(engine)["kb:hr/pay.md"]["metadata"]["acl"] == ["group:hr"]


def test_acl_and_acl_rules_together_are_refused():
    with pytest.raises(ValidationError, match="not both"):
        Source.model_validate({"name": "kb", "configMap": {"name": "a"}, "acl": ["group:a"],
                               "aclRules": [{"paths": ["**"], "acl": ["group:b"]}]})
