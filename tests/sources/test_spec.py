"""``spec.sources[]`` validation in the operator's models (the CRD's CEL rules mirror these)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragengine_operator.spec.sources import Source, duration_seconds, unique_names


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


@pytest.mark.parametrize("ref, ok", [("main", True), ("v1.2.3", True), ("refs/heads/feature/x", True),
                                     ("3f2a9c1e77d0" * 3 + "abcd", True), ("-x", False),
                                     ("--upload-pack=touch /tmp/pwned", False), ("main branch", False), ("a:b", False)])
def test_a_git_ref_is_a_ref_never_an_option(ref, ok):
    if ok:
        assert src(git={"url": "https://example.com/r.git", "ref": ref}).git.ref == ref
    else:
        with pytest.raises(ValidationError, match="not starting with '-'"):
            src(git={"url": "https://example.com/r.git", "ref": ref})


def test_globs_have_at_most_16_stars():
    assert src(git={"url": "https://example.com/r.git", "paths": ["*a" * 16, "docs/**/*.md"]}).git is not None
    with pytest.raises(ValidationError, match="at most 16"):
        src(git={"url": "https://example.com/r.git", "paths": ["*a" * 17]})


def test_caps_have_defaults_and_sizes_parse():
    plain = src(configMap={"name": "kb"})
    assert plain.max_files == 5000 and plain.max_bytes == 64 * 1024 * 1024
    assert src(configMap={"name": "kb"}, maxSize="500M").max_bytes == 500_000_000
    for bad in ("0", "1.5Gi", "lots", "-1"):
        with pytest.raises(ValidationError, match="not a size"):
            src(configMap={"name": "kb"}, maxSize=bad)
    with pytest.raises(ValidationError):
        src(configMap={"name": "kb"}, maxFiles=0)
