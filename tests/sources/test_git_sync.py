"""Git sources end to end: a real engine (FAISS), the real sync code, a real git server (Debian's
``git http-backend`` with Basic auth) and commits that add, modify, rename and delete files."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest

from ragengine_operator.net.egress import EgressPolicy
from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.sync import FetchPolicy, fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.support.embedding import borrowed
from tests.support.git_server import Repo, git_http_server
from tests.support.server import refused_port, serve_app

AUTH = ("reader", "s3cret-token")
# The test servers listen on loopback, which the egress rules refuse by default: the allowlist opens it.
LOOPBACK = FetchPolicy(egress=EgressPolicy.build(["127.0.0.1/32"]))


@pytest.fixture
def engine(embedder, tmp_path):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    app = create_app(EngineSettings(data_dir=tmp_path / "data"))
    with borrowed(embedder) as own:
        app.state.embedder = own
        with serve_app(app) as base:
            yield base


@pytest.fixture
def git(tmp_path):
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    with git_http_server(root, auth=AUTH) as base:
        yield repo, f"{base}/docs.git"


def embedded(base: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    found = re.search(r'^ragengine_embedded_texts_total\{kind="documents"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def held(base: str, index: str = "docs") -> dict[str, dict]:
    page = httpx.get(f"{base}/indexes/{index}/documents", params={"limit": 100, "max_text_length": 100000}).json()
    return {d["doc_id"]: d for d in page["documents"]}


def run(source: Source, engine: str, tmp_path: Path, secret: dict | None, previous: str | None = None):
    client = EngineClient(engine)
    try:
        return sync_source(source, client, lambda: fetch(source, cache=tmp_path / "cache", secret=secret,
                                                         previous_revision=previous, previous_validators=None,
                                                         policy=LOOPBACK), previous)
    finally:
        client.close()


def test_index_follows_each_commit_and_an_unchanged_resync_embeds_nothing(engine, git, tmp_path):
    repo, url = git
    secret = {"username": AUTH[0], "password": AUTH[1]}
    source = Source.model_validate({"name": "handbook", "index": "docs", "git": {"url": url, "paths": ["**/*"]}})
    # A document a user added by API to the same index: no sync may touch it.
    httpx.post(f"{engine}/index", json={"index_name": "docs", "documents": [{"doc_id": "manual", "text": "Added by hand."}]})

    repo.write("guide.md", "# Guide\n\nThe engine answers questions from the handbook.\n")
    repo.write("ref/api.rst", "API\n===\n\nPOST /retrieve returns chunks.\n")
    repo.write("site/page.html", "<html><head><style>x{}</style></head><body><h1>Page</h1><p>Hello there.</p></body></html>")
    repo.write("tools/run.py", "def main():\n    return 42\n")
    repo.write("logo.png", b"\x89PNG\r\n\x1a\n\x00\x00binary")
    repo.write("latin1.txt", "caf\xe9".encode("latin-1"))
    first = repo.commit("first")
    result = run(source, engine, tmp_path, secret)
    assert result.ok, result.message
    assert result.revision == first and result.documents == 4 and result.skipped == 2
    docs = held(engine)
    assert set(docs) == {"manual", "handbook:guide.md", "handbook:ref/api.rst", "handbook:site/page.html",
                         "handbook:tools/run.py"}
    page = docs["handbook:site/page.html"]
    assert page["text"] == "# Page\n\nHello there." and page["metadata"]["revision"] == first  # its heading kept
    assert docs["handbook:tools/run.py"]["metadata"]["language"] == "python"
    assert docs["handbook:guide.md"]["metadata"]["source"] == "handbook"

    repo.write("guide.md", "# Guide\n\nThe engine answers questions from the handbook, with sources.\n")
    repo.move("ref/api.rst", "reference/api.rst")
    repo.remove("site/page.html")
    repo.write("new.txt", "A new file.")
    second = repo.commit("second")
    result = run(source, engine, tmp_path, secret, previous=first)
    assert result.ok and result.revision == second, result.message
    docs = held(engine)
    assert set(docs) == {"manual", "handbook:guide.md", "handbook:reference/api.rst", "handbook:tools/run.py",
                         "handbook:new.txt"}
    assert "with sources" in docs["handbook:guide.md"]["text"] and docs["handbook:guide.md"]["metadata"]["revision"] == second
    assert docs["handbook:tools/run.py"]["metadata"]["revision"] == first  # unchanged files keep their revision
    hits = httpx.post(f"{engine}/retrieve", json={"index_name": "docs", "query": "POST /retrieve returns chunks"}).json()
    assert hits["results"][0]["doc_id"] == "handbook:reference/api.rst"

    before = embedded(engine)
    again = run(source, engine, tmp_path, secret, previous=second)  # same commit: nothing read, nothing written
    assert again.ok and again.message == "up to date"
    repo.write("logo.png", b"\x89PNG\r\n\x1a\n\x00\x01other")  # a new commit that changes no indexed text
    third = repo.commit("third")
    result = run(source, engine, tmp_path, secret, previous=second)
    assert result.ok and result.revision == third and result.written == 0, result.message
    assert embedded(engine) == before
    assert held(engine)["manual"]["text"] == "Added by hand."


def test_bad_sources_report_a_reason_and_lose_nothing(engine, git, tmp_path):
    repo, url = git
    repo.write("a.md", "Alpha document.")
    repo.write("big.txt", "x" * (21 * 1024 * 1024))
    repo.commit("one")
    good = {"username": AUTH[0], "password": AUTH[1]}
    source = Source.model_validate({"name": "s", "index": "docs", "git": {"url": url}})
    ok = run(source, engine, tmp_path, good)
    assert ok.ok and ok.documents == 1 and "big.txt: too large" in ok.message

    cases = [
        (source, {"username": AUTH[0], "password": "wrong"}, "refused the credentials"),
        (Source.model_validate({"name": "s", "index": "docs", "git": {"url": url, "ref": "no-such-branch"}}), good,
         "ref not found"),
        (Source.model_validate({"name": "s", "index": "docs", "git": {"url": url, "paths": ["*.pdf"]}}), good,
         "matches paths"),
    ]
    with refused_port() as port:
        cases.append((Source.model_validate({"name": "s", "index": "docs",
                                             "git": {"url": f"http://127.0.0.1:{port}/x.git"}}), good, "unreachable"))
        for bad, secret, reason in cases:
            result = run(bad, engine, tmp_path / bad.git.ref, secret)
            assert not result.ok and reason in result.message, result.message
            assert set(held(engine)) == {"s:a.md"}  # nothing already indexed is lost


def test_a_write_failing_part_way_says_how_much_of_the_revision_was_written(engine):
    from ragengine_operator.sources.engine import EngineUnavailable
    from ragengine_operator.sources.plan import Document, SyncPlan

    good = [Document(f"s:{i}.md", f"Document number {i}.", {"source": "s"}) for i in range(32)]
    refused = [Document("s:bad.md", "", {"source": "s"})]  # an empty text: the engine answers 400
    client = EngineClient(engine)
    try:
        with pytest.raises(EngineUnavailable) as failed:
            client.apply("partial", SyncPlan(add=good + refused))
    finally:
        client.close()
    assert "partly synced: 32 of 33 added" in str(failed.value) and "answered 400" in str(failed.value)
    assert len(held(engine, "partial")) == 32


def test_ssh_source_with_the_key_and_host_key_from_the_secret(engine, tmp_path):
    """git over SSH against a real sshd: the Secret's identity logs in, its known_hosts pins the host key
    (strict checking: a wrong host key is refused, never accepted on first use)."""
    from tests.support.ssh_server import ssh_server

    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("runbook.md", "# Runbook\n\nRestart the service, then check the logs.\n")
    commit = repo.commit("first")
    with ssh_server() as ssh:
        source = Source.model_validate({"name": "ops", "index": "docs", "git": {"url": ssh.url_for(repo.bare)}})
        good = {"identity": ssh.client_key, "known_hosts": ssh.known_hosts}
        result = run(source, engine, tmp_path, good)
        assert result.ok and result.revision == commit, result.message
        assert set(held(engine)) == {"ops:runbook.md"}

        another_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEcdJzJx2tkTq1r6r2f0GMc3l+4qYwLz7p5cNn1WZs4B"
        other_host = f"{ssh.known_hosts.split()[0]} {another_key}\n"
        refused = run(source, engine, tmp_path / "other", {"identity": ssh.client_key, "known_hosts": other_host})
        assert not refused.ok and "host key" in refused.message.lower(), refused.message
        unknown = run(source, engine, tmp_path / "unknown", {"identity": good["identity"], "known_hosts": ""})
        assert not unknown.ok and "host key" in unknown.message.lower(), unknown.message
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
        stranger = run(source, engine, tmp_path / "stranger-cache",
                       {"identity": (tmp_path / "stranger").read_text(), "known_hosts": ssh.known_hosts})
        assert not stranger.ok and "refused the credentials" in stranger.message, stranger.message
        assert set(held(engine)) == {"ops:runbook.md"}


def test_a_changed_chunking_re_indexes_the_index_and_an_unchanged_one_does_not(engine, git, tmp_path):
    """A source's chunking applies when its index is created; editing it later re-indexes the index (a new
    version built from the stored text while the old one serves), even when the repository did not move."""
    from tests.support.versions import wait_job

    repo, url = git
    repo.write("guide.md", "# Guide\n\n" + " ".join(f"Step {i} tightens bolt {i} on the frame." for i in range(120)))
    revision = repo.commit("first")
    source = Source.model_validate({"name": "handbook", "index": "docs", "git": {"url": url, "secretRef": {"name": "g"}},
                                    "chunking": {"chunkSize": 128, "chunkOverlap": 16}})
    secret = {"username": AUTH[0], "password": AUTH[1]}
    first = run(source, engine, tmp_path, secret)
    assert first.ok and "re-indexing" not in first.message, first.message
    versions = httpx.get(f"{engine}/indexes/docs/versions").json()
    assert versions["live_version"] == 1 and versions["versions"][0]["chunking"]["chunk_size"] == 128
    again = run(source, engine, tmp_path, secret, previous=revision)  # unchanged: nothing started
    assert again.message == "up to date" and httpx.get(f"{engine}/indexes/docs/versions").json()["job"] is None
    smaller = Source.model_validate({**source.model_dump(by_alias=True, exclude_none=True),
                                     "chunking": {"chunkSize": 48, "chunkOverlap": 8}})
    result = run(smaller, engine, tmp_path, secret, previous=revision)
    assert result.ok and result.message == "up to date; re-indexing to the new chunking (version 2)", result.message
    done = wait_job(engine, "docs")
    assert done["job"]["state"] == "succeeded" and done["live_version"] == 2
    live = {v["version"]: v for v in done["versions"]}[2]
    assert (live["chunking"]["chunk_size"], live["chunking"]["chunk_overlap"]) == (48, 8)
    assert run(smaller, engine, tmp_path, secret, previous=revision).message == "up to date"
