"""``spec.sources[]`` validation in the operator's models (the CRD's CEL rules mirror these)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragengine_operator.sources.spec import Source, duration_seconds, unique_names


def src(**kw) -> Source:
    return Source.model_validate({"name": "docs", **kw})


def test_exactly_one_kind():
    assert src(git={"url": "https://example.com/r.git"}).kind == "git"
    with pytest.raises(ValidationError, match="exactly one of configMap, git, http"):
        src()
    with pytest.raises(ValidationError, match="exactly one of configMap, git, http"):
        src(git={"url": "https://example.com/r.git"}, configMap={"name": "kb"})


@pytest.mark.parametrize("url", ["https://user:pw@example.com/r.git", "https://token@example.com/r.git"])
def test_credentials_in_a_url_are_refused(url):
    with pytest.raises(ValidationError, match="must not contain credentials"):
        src(git={"url": url})


def test_ssh_forms_are_accepted():
    assert src(git={"url": "git@github.com:org/repo.git"}).git.url.startswith("git@")
    assert src(git={"url": "ssh://git@host/org/repo.git"}).git is not None


@pytest.mark.parametrize("interval,ok", [("5m", True), ("1h30m", True), ("30s", True), ("5", False), ("1s", False)])
def test_interval(interval, ok):
    if ok:
        assert duration_seconds(src(interval=interval, configMap={"name": "kb"}).interval) >= 10
    else:
        with pytest.raises(ValidationError):
            src(interval=interval, configMap={"name": "kb"})


def test_names_are_dns_labels_and_unique():
    with pytest.raises(ValidationError):
        src(name="Not_A_Label", configMap={"name": "kb"})
    two = [src(configMap={"name": "a"}), src(configMap={"name": "b"})]
    with pytest.raises(ValueError, match="two sources are named 'docs'"):
        unique_names(two)
    assert src(configMap={"name": "kb"}).index_name == "docs"
