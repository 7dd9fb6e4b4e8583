"""Bounded fetches (findings 2, 3 and 6 of the security review): a gzip bomb, a repository of large
compressible files, a server that trickles, a git server that stalls, an S3 endpoint that trickles or
floods its listing, and a pathological glob each
end with a reason, in bounded memory and within the fetch's deadline, against real servers.

Memory is the test process's peak resident set (``VmHWM``), reset before each attack (Linux
``clear_refs``): the growth is printed, and asserted to stay far below what the attack decodes to.
Hangs are caught by a hard deadline in the test that only a hang would reach, never by timing."""

from __future__ import annotations

import contextlib
import gzip
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragengine_operator.sources import s3 as s3_reader
from ragengine_operator.sources.fetch import FetchError, FetchLimits, fetch_git, fetch_http
from ragengine_operator.sources.s3 import fetch_s3
from ragengine_operator.sources.sync import FetchPolicy, fetch
from ragengine_operator.spec.sources import S3Source, Source
from tests.sources.test_git_sync import LOOPBACK
from tests.support.bounded import peak_kib, reset_peak
from tests.support.bounded import within as bounded_within
from tests.support.git_server import Repo, git_http_server
from tests.support.hostile_http import flood, trickle
from tests.support.web import web_server

MiB = 1024 * 1024
HANG = 120.0  # seconds: only a fetch that ignores its deadline gets near this


def within(seconds: float, work):
    return bounded_within(seconds, work, "the fetch has no deadline")


def test_a_gzip_bomb_is_cut_at_the_decoded_limit_in_bounded_memory():
    decoded = 300 * MiB
    bomb = gzip.compress(b"\0" * decoded, compresslevel=9)
    routes = {"/doc.txt": (200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"}, bomb),
              "/fine.txt": (200, {"Content-Type": "text/plain"}, b"A normal page.")}
    with web_server(routes) as site:
        before = reset_peak()
        got = fetch_http([site.url("/doc.txt"), site.url("/fine.txt")], {}, policy=LOOPBACK.egress)
        grew_mib = (peak_kib() - before) / 1024
    print(f"\ngzip bomb: {len(bomb)} bytes on the wire, {decoded // MiB} MiB decoded; "
          f"peak RSS growth {grew_mib:.1f} MiB (limit {FetchLimits().max_file_bytes // MiB} MiB per file)")
    assert got.skipped[site.url("/doc.txt")].startswith("too large: more than"), got.skipped
    assert [f.text for f in got.files] == ["A normal page."]
    assert grew_mib < 100, f"peak RSS grew {grew_mib:.0f} MiB for a {decoded // MiB} MiB bomb"


def test_a_trickling_server_cannot_hold_a_fetch_past_its_deadline():
    stop = threading.Event()

    def trickle(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        while not stop.is_set():  # one byte every 0.2 s: each read is well within any read timeout
            handler.wfile.write(b"x")
            handler.wfile.flush()
            stop.wait(0.2)

    with web_server({"/slow.txt": trickle}) as site:
        limits = FetchLimits(deadline_s=2.0)
        try:
            with pytest.raises(FetchError, match="did not finish within 2 s"):
                within(HANG, lambda: fetch_http([site.url("/slow.txt")], {}, policy=LOOPBACK.egress, limits=limits))
        finally:
            stop.set()


def test_a_stalling_git_server_cannot_hold_a_fetch_past_its_deadline(tmp_path):
    """A server that accepts the connection and never answers (git's own timeouts would wait minutes)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/docs.git"
        with pytest.raises(FetchError, match="did not finish within 2 s"):
            within(HANG, lambda: fetch_git(url, "main", ["**"], tmp_path / "cache", policy=LOOPBACK.egress,
                                           limits=FetchLimits(deadline_s=2.0)))
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        listener.close()
        for conn in held:
            conn.close()


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "git"
    root.mkdir()
    with git_http_server(root) as base:
        yield Repo(root), f"{base}/docs.git"


def test_a_repository_of_large_compressible_files_is_refused_before_it_is_read(repo, tmp_path):
    """30 files of 6 MiB of text (180 MiB, a few hundred KB packed) against the default maxSize (64Mi)."""
    work, url = repo
    for i in range(30):
        work.write(f"big-{i:02}.txt", ("All work and no play. " * (6 * MiB // 22)))
    work.write("small.md", "# Small\n\nA small page.\n")
    work.commit("bomb")
    source = Source.model_validate({"name": "bomb", "git": {"url": url}})
    before = reset_peak()
    with pytest.raises(FetchError, match="more than 67108864 bytes") as refused:
        fetch(source, cache=tmp_path / "cache", secret=None, previous_revision=None, previous_validators=None,
              policy=LOOPBACK)
    grew_mib = (peak_kib() - before) / 1024
    print(f"\ngit bomb: 30 x 6 MiB files; refused ({refused.value}); peak RSS growth {grew_mib:.1f} MiB")
    assert "maxSize" in str(refused.value)
    assert grew_mib < 60, f"peak RSS grew {grew_mib:.0f} MiB"

    narrowed = Source.model_validate({"name": "bomb", "git": {"url": url, "paths": ["*.md"]}})
    got = fetch(narrowed, cache=tmp_path / "cache", secret=None, previous_revision=None, previous_validators=None,
                policy=LOOPBACK)
    assert [f.path for f in got.files] == ["small.md"]


def test_caps_on_files_and_bytes_and_blobs_over_the_limit_are_never_downloaded(repo, tmp_path):
    work, url = repo
    for i in range(12):
        work.write(f"page-{i:02}.md", f"# Page {i}\n\nText of page {i}.\n")
    work.write("huge.txt", "y" * (256 * 1024))
    work.commit("pages")
    few = Source.model_validate({"name": "s", "maxFiles": 10, "git": {"url": url}})
    with pytest.raises(FetchError, match=r"more than 10 files .* maxFiles"):
        fetch(few, cache=tmp_path / "c1", secret=None, previous_revision=None, previous_validators=None, policy=LOOPBACK)
    small = Source.model_validate({"name": "s", "maxSize": "100Ki", "git": {"url": url}})
    with pytest.raises(FetchError, match=r"more than 102400 bytes .* maxSize"):
        fetch(small, cache=tmp_path / "c2", secret=None, previous_revision=None, previous_validators=None, policy=LOOPBACK)
    ceiling = FetchPolicy(egress=LOOPBACK.egress, limits=FetchLimits(max_files=5, max_bytes=MiB))  # the operator's
    with pytest.raises(FetchError, match="more than 5 files"):
        fetch(Source.model_validate({"name": "s", "git": {"url": url}}), cache=tmp_path / "c3", secret=None,
              previous_revision=None, previous_validators=None, policy=ceiling)

    got = fetch_git(url, "main", ["**"], tmp_path / "c4", policy=LOOPBACK.egress,
                    limits=FetchLimits(max_file_bytes=64 * 1024))
    assert len(got.files) == 12 and got.skipped == {"huge.txt": "too large: over 65536 bytes (not downloaded)"}
    sha = work.git("rev-parse", "HEAD:huge.txt")
    absent = subprocess.run(["git", "cat-file", "-e", sha], cwd=tmp_path / "c4", capture_output=True,
                            env={"GIT_NO_LAZY_FETCH": "1", "PATH": "/usr/bin:/bin"})
    assert absent.returncode != 0  # the filter kept it on the server


def test_a_pathological_glob_matches_in_linear_time(repo, tmp_path):
    """The review's glob (14 '*a') against a 40-character name froze the process for days by
    extrapolation (the regex engine holds the GIL, so only a separate process can be timed out)."""
    work, url = repo
    work.write("a" * 40, "forty a")
    work.write(("a" * 200) + "/" + ("a" * 200) + ".md", "deep")
    work.write("ab.md", "matches")
    work.commit("names")
    glob = "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"
    program = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from ragengine_operator.spec.sources import Source\n"
        "from ragengine_operator.sources.sync import fetch\n"
        "from tests.sources.test_git_sync import LOOPBACK\n"
        f"s = Source.model_validate({{'name': 'g', 'git': {{'url': {url!r}, 'paths': [{glob!r}, '*b.md']}}}})\n"
        f"got = fetch(s, cache=Path({str(tmp_path / 'cache')!r}), secret=None, previous_revision=None,"
        " previous_validators=None, policy=LOOPBACK)\n"
        "print(json.dumps(sorted(f.path for f in got.files)))\n"
    )
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=HANG,
                              cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        pytest.fail(f"glob matching still running after {HANG:g} s", pytrace=False)
    print(f"\npathological glob: the sync's fetch took {time.monotonic() - started:.2f} s (process start included)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == '["ab.md"]'


def _listing(*keys: tuple[str, int]) -> bytes:
    contents = "".join(f"<Contents><Key>{k}</Key><ETag>\"e-{i}\"</ETag><Size>{size}</Size>"
                       f"<LastModified>2026-11-28T12:00:00.000Z</LastModified></Contents>"
                       for i, (k, size) in enumerate(keys))
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>lake</Name><IsTruncated>false</IsTruncated>{contents}</ListBucketResult>").encode()


def test_an_s3_bucket_is_read_under_the_egress_policy_the_fetch_deadline_and_the_caps(monkeypatch):
    stop = threading.Event()
    xml = {"Content-Type": "application/xml"}
    routes = {"/lake/": (200, xml, _listing(("kb/a.md", 100000))), "/lake/kb/a.md": trickle(stop, every_s=0.2)}
    with web_server(routes) as site:
        spec = S3Source.model_validate({"endpoint": site.base, "bucket": "lake", "prefix": "kb/"})
        try:  # an object that trickles: cut at the fetch's deadline, not at each read's timeout
            with pytest.raises(FetchError, match="did not finish within 2 s"):
                within(HANG, lambda: fetch_s3(spec, policy=LOOPBACK.egress, limits=FetchLimits(deadline_s=2.0)))
        finally:
            stop.set()
        monkeypatch.setattr(s3_reader, "MAX_LISTING_BYTES", MiB)
        routes["/lake/"] = flood(16 * MiB)  # a listing page that never ends: cut at the page's cap
        before = reset_peak()
        with pytest.raises(FetchError, match=f"a listing page over {MiB} bytes"):
            within(HANG, lambda: fetch_s3(spec, policy=LOOPBACK.egress))
        assert (peak_kib() - before) / 1024 < 48
        asked = len(site.seen)
        with pytest.raises(FetchError, match="refused by the egress policy"):  # loopback is not a public address
            fetch_s3(spec)
        assert len(site.seen) == asked  # the refused endpoint was never contacted
