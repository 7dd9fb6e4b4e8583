"""Failures are reported, never escape (finding 6 of the security review), and the low items on the
sources' side (15, 16, and the ServiceAccount-token part of 9): a file the parser chokes on is skipped
with its reason while the others sync; index names reach the engine escaped; the git cache follows the
source's URL and stays under its budget; a ServiceAccount token is never a source's credentials."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from ragengine_operator.sources import cache as clones
from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.fetch import FetchError
from ragengine_operator.sources.sync import FetchPolicy, fetch, source_secret, sync_source
from ragengine_operator.spec.sources import Source
from tests.sources.test_git_sync import LOOPBACK, engine, held  # noqa: F401 - the engine fixture
from tests.support.git_server import Repo, git_http_server
from tests.support.web import web_server


def hostile_pdf() -> bytes:
    """A 500-byte PDF whose xref declares 100000 entries: pypdf raises LimitReachedError, which the
    extractor did not expect (the review's pdf_escape: the whole sync raised)."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >>"]
    out, offsets = b"%PDF-1.4\n", []
    for i, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, obj)
    xref = len(out)
    out += b"xref\n0 100000\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref


def sync(source: Source, engine: str, tmp_path, previous: str | None = None, policy: FetchPolicy = LOOPBACK):  # noqa: F811
    client = EngineClient(engine)
    try:
        return sync_source(source, client, lambda: fetch(source, cache=tmp_path / "cache", secret=None,
                                                         previous_revision=previous, previous_validators=None,
                                                         policy=policy), previous)
    finally:
        client.close()


def test_a_file_the_parser_chokes_on_is_skipped_and_the_others_sync(engine, tmp_path):  # noqa: F811
    routes = {"/guide.txt": (200, {"Content-Type": "text/plain"}, b"The guide still syncs."),
              "/report.pdf": (200, {"Content-Type": "application/pdf"}, hostile_pdf())}
    with web_server(routes) as site:
        source = Source.model_validate({"name": "web", "index": "mixed", "http": {"urls": [site.url(p) for p in routes]}})
        result = sync(source, engine, tmp_path)
    assert result.ok and result.documents == 1 and result.skipped == 1, result.message
    assert list(result.skipped_examples) == [site.url("/report.pdf")], result.message  # with its reason
    assert set(held(engine, "mixed")) == {f"web:{site.url('/guide.txt')}"}


def test_index_names_reach_the_engine_escaped(engine, tmp_path):  # noqa: F811
    """'?' and '#' are valid in engine index names; unescaped, the operator asked the engine about
    another path, found nothing, and rewrote (re-embedded) every document at every sync."""
    name = "faq?x=1#top"
    with web_server({"/faq.txt": (200, {"Content-Type": "text/plain", "ETag": '"v1"'}, b"Questions.")}) as site:
        source = Source.model_validate({"name": "faq", "index": name, "http": {"urls": [site.url("/faq.txt")]}})
        first = sync(source, engine, tmp_path)
        assert first.ok and first.written == 1, first.message
        again = sync(source, engine, tmp_path)  # content unchanged: nothing to write
    assert again.ok and again.written == 0, again.message
    docs = httpx.get(f"{engine}/indexes/{quote(name, safe='')}/documents").json()["documents"]
    assert [d["doc_id"] for d in docs] == [f"faq:{site.url('/faq.txt')}"]


@pytest.mark.parametrize("index", ["../persist", "a/b", ".", "..", " ", "tab\there"])
def test_index_names_the_engine_refuses_are_refused_in_the_spec(index):
    with pytest.raises(ValueError, match="index must be a name the engine accepts"):
        Source.model_validate({"name": "s", "index": index, "configMap": {"name": "c"}})


def test_the_git_cache_follows_the_url_and_stays_under_its_budget(tmp_path):
    root = tmp_path / "git"
    root.mkdir()
    one, two = Repo(root, "one"), Repo(root, "two")
    for repo in (one, two):
        repo.write("a.md", f"From {repo.bare.name}.")
        repo.commit("c")
    cache_root = tmp_path / "cache"
    engine_dir = cache_root / "team-a" / "rag"
    with git_http_server(root) as base:
        for name in ("one", "two"):
            source = Source.model_validate({"name": "docs", "git": {"url": f"{base}/{name}.git"}})
            got = fetch(source, cache=engine_dir, secret=None, previous_revision=None, previous_validators=None,
                        policy=LOOPBACK)
            assert [f.text for f in got.files] == [f"From {name}.git."]
            assert [p.name for p in (engine_dir / "docs").iterdir()] == [clones.clone_dir(engine_dir, "docs",
                                                                                       source.git.url).name]
        other = Source.model_validate({"name": "other", "git": {"url": f"{base}/one.git"}})
        fetch(other, cache=engine_dir, secret=None, previous_revision=None, previous_validators=None, policy=LOOPBACK)
        assert len(clones.clones(cache_root)) == 2
        tight = FetchPolicy(egress=LOOPBACK.egress, cache_max_bytes=1)  # every clone is over budget
        fetch(other, cache=engine_dir, secret=None, previous_revision=None, previous_validators=None, policy=tight)
    assert clones.clones(cache_root) == []  # over budget: removed once the sync is done
    (engine_dir / "docs" / "x").mkdir(parents=True)
    clones.remove(cache_root, "team-a", "rag", "docs")
    assert not (engine_dir / "docs").exists()
    clones.sweep(cache_root, live={("team-b", "other")})
    assert not engine_dir.exists()


def test_a_service_account_token_is_never_a_sources_credentials():
    token = {"metadata": {"name": "ci-deployer-sa-token"}, "type": "kubernetes.io/service-account-token",
             "data": {"token": "c2VjcmV0"}}
    with pytest.raises(FetchError, match="is a ServiceAccount token"):
        source_secret(token, "team-a")
    assert source_secret({"metadata": {"name": "git"}, "type": "Opaque", "data": {"token": "c2VjcmV0"}},
                         "team-a") == {"token": "secret"}
