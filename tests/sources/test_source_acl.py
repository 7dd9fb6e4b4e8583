"""``spec.sources[].acl``: every document of a source carries the source's document ACL, and a change of it
is a metadata-only update (no re-embedding); ``metadata.acl`` (a string, which would hide everything) is
refused in favour of the list."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.spec import Source
from ragengine_operator.sources.sync import fetch, sync_source
from tests.sources.test_git_sync import LOOPBACK, embedded, engine, held  # noqa: F401 - the engine fixture
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
