"""Issue 22's fuzz pass: hostile ``spec.sources`` values (URLs, refs, globs) through the real API server's
validation, the operator's model and a real sync worker process (the subprocess mode's sandbox, under the
operator's default egress rules with loopback opened for the test's own git server).

Whatever the values, the API server answers 201 or 422 (never a 500), the operator's model accepts or refuses
them with a ValidationError, and the worker returns a result within its deadline: no crash, no hang, and no
process over its memory limit (the worker runs under an address-space limit; run alone with -s, the test prints
the peak RSS of its children).
"""

from __future__ import annotations

import asyncio
import resource
import time

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ragengine_operator.manifests.labels import Owner
from ragengine_operator.settings import OperatorSettings
from ragengine_operator.sources.protocol import Limits, Prepared, SyncRequest
from ragengine_operator.sources.sync import SyncResult, policy_settings
from ragengine_operator.spec.sources import Source
from ragengine_operator.syncer.in_subprocess import SubprocessRunner
from tests.support.git_server import Repo, git_http_server
from tests.support.server import serve_app

LIMITS = Limits("512Mi", 20, 30)  # memory, CPU seconds, wall-clock seconds of one worker
OWNER = Owner("fuzz", "kb", "uid-fuzz")
HOSTILE_URLS = [
    "http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/", "http://0x7f000001/x.git",
    "http://localhost/x.git", "https://kb.other-team.svc.cluster.local/x.git", "file:///etc/passwd",
    "ext::sh -c id", "git@github.com:a/b.git", "ssh://-oProxyCommand=id/x", "http://127.0.0.1:1/x.git",
    "https://user:secret@example.invalid/x.git", "http://[fe80::1%25eth0]/", "http://10.0.0.1/x.git",
]
REF_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",))
GLOB_ALPHABET = "*?[]!/a.-_{}\\ "


async def _engine(request: Request) -> JSONResponse:
    """An engine that holds nothing and accepts every write: the sync reaches its push."""
    if request.method == "GET":
        return JSONResponse({"documents": [], "total_items": 0})
    return JSONResponse({"indexed": 0})


ENGINE = Starlette(routes=[Route("/{path:path}", _engine, methods=["GET", "POST"])])


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """(the test's git repository URL, an engine URL): real servers on loopback."""
    root = tmp_path_factory.mktemp("fuzz-git")
    repo = Repo(root, "docs")
    for path in ("README.md", "docs/a.md", "docs/deep/b.md", "x" * 200 + ".md"):
        repo.write(path, "# Title\n\nSome text.\n")
    repo.commit("docs")
    with git_http_server(root) as git_base, serve_app(ENGINE, ready_path="/indexes/x/documents") as engine:
        yield f"{git_base}/docs.git", engine


def _sync(source: dict, engine: str) -> tuple[SyncResult, float]:
    allowed = policy_settings(OperatorSettings(sources_egress_allow=["127.0.0.0/8"]))
    request = SyncRequest("sync", source["name"], "docs", engine, source, fetch_policy=allowed)
    started = time.monotonic()
    result = asyncio.run(SubprocessRunner(None, LIMITS, "64Mi").run(OWNER, Prepared(request), None))  # type: ignore[arg-type]
    return result, time.monotonic() - started


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_hostile_source_values_are_refused_or_synced_never_a_crash_hang_or_oom(kube, bare_namespace, targets, data):
    repo_url, engine = targets
    if data.draw(st.booleans(), "shaped"):  # values shaped as the schema wants: they reach the worker
        url = data.draw(st.sampled_from([repo_url] * len(HOSTILE_URLS) + HOSTILE_URLS), "url")
        ref = data.draw(st.sampled_from(["main"] * 5 + ["HEAD~1", "refs/heads/main", "v1.0", "a" * 200]), "ref")
        glob = data.draw(st.one_of(st.sampled_from(["*" * 16 + "a", "**/" * 20 + "*.md", "docs/**/*.md", "x" * 200 + "*"]),
                                   st.text("*?/a.-_", min_size=1, max_size=48)), "glob")
    else:  # anything: the API server or the operator's model must refuse it cleanly
        url = data.draw(st.one_of(st.sampled_from(HOSTILE_URLS), st.text(REF_CHARS, max_size=80)), "url")
        ref = data.draw(st.one_of(st.sampled_from(["-", "--upload-pack=id", "refs/../x", "main:x"]),
                                  st.text(REF_CHARS, max_size=40)), "ref")
        glob = data.draw(st.one_of(st.sampled_from(["*" * 17 + "a", "["]), st.text(GLOB_ALPHABET, max_size=48)), "glob")
    source = {"name": "fuzz", "index": "docs", "git": {"url": url, "ref": ref, "paths": [glob]}}

    # the real API server: the CRD's schema decides, with a 201 (dry run: nothing is stored) or a 422
    body = {"apiVersion": "ragengine.io/v1alpha1", "kind": "RAGEngine", "metadata": {"name": "fuzz"},
            "spec": {"sources": [source]}}
    try:
        kube.custom.create_namespaced_custom_object("ragengine.io", "v1alpha1", bare_namespace, "ragengines", body,
                                                    dry_run="All")
    except ApiException as exc:
        assert exc.status == 422, (exc.status, exc.body)
        event("refused by the API server (422)")
        return
    try:
        Source.model_validate(source)
    except ValidationError:
        event("refused by the operator's model")
        return  # refused by the operator's model (reported as InvalidSpec), never handed to a worker
    event("reached the worker")
    result, took = _sync(source, engine)
    event(f"worker result ok={result.ok}")
    assert isinstance(result, SyncResult) and result.name == "fuzz", result
    assert result.ok or result.message, result
    assert took < LIMITS.deadline_seconds + 15, (took, source)  # its deadline ended it, if nothing else did
    # (the worker's address space is limited to LIMITS.memory: past it, the result says "out of memory")
    print(f"peak RSS of this process's children so far: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB")
