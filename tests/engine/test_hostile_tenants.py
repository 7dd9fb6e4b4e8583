"""Issue 41, a hostile tenant against a real ``ragengine serve`` process: limits before work.

Body limits come before the body: a key may not make the engine read a body it will refuse. An import is a
write like ``POST /index``: each document is checked as ``/index`` checks it, and a small file that inflates
to gigabytes is refused in bounded memory. Memory is the
engine process's peak resident set (``VmHWM``, reset before each attack through ``/proc/<pid>/clear_refs``);
bytes read are the body bytes the socket took before the answer came (``push_body``: what the server read,
plus the kernel's buffers).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import zlib
from pathlib import Path

import httpx
import numpy as np
import pytest

from ragengine.versions import archive
from tests.support.engine_process import EngineProcess, engine_process
from tests.support.hostile import push_body

MiB = 1024 * 1024
ADMIN = "admin-hostile-0123456789"
READER = "reader-hostile-0123456789"
WRITER = "writer-hostile-0123456789"
NO_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--"] \
    if os.geteuid() == 0 else []
ACCESS = {"keys": [{"name": "reader", "key": READER, "indexes": ["*"], "role": "read"},
                   {"name": "writer", "key": WRITER, "indexes": ["*"], "role": "write"}]}


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EngineProcess:
    work = tmp_path_factory.mktemp("hostile")
    (work / "access.yaml").write_text(json.dumps(ACCESS))
    # The admin key in the environment, as a pod gets it from its Secret (what a parser child went after), and
    # no capabilities, as the chart runs it (a root test runner's would let any reader in).
    with engine_process(work, settings={"access_file": str(work / "access.yaml")}, env={"RAGENGINE_API_KEY": ADMIN},
                        exec_prefix=NO_CAPABILITIES) as proc:
        created = httpx.post(f"{proc.base_url}/v1/vector_stores", json={"name": "kb", "index_name": "kb"},
                             headers=auth(ADMIN), timeout=120)
        assert created.status_code == 200, created.text
        yield proc


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def peak_mib(pid: int, reset: bool = False) -> float:
    if reset:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak becomes the current resident set
    return int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) / 1024


def attack(engine: EngineProcess, path: str, key: str, total: int) -> tuple[int | None, float, float]:
    """A ``total``-byte JSON body to ``path``: (status, MiB the socket took, MiB the engine's peak grew)."""
    before = peak_mib(engine.pid, reset=True)
    pushed = push_body(engine.base_url, path, {**auth(key), "Content-Type": "application/json"}, total,
                       prefix=b'{"attributes": {"a": "')
    grown = peak_mib(engine.pid) - before
    print(f"{path} as {key.split('-')[0]}: {pushed.status}, {pushed.accepted / MiB:.1f} MiB taken, "
          f"peak RSS +{grown:.0f} MiB")
    return pushed.status, pushed.accepted / MiB, grown


def test_a_read_key_is_refused_before_its_body_is_read(engine):
    """The review's attack: 200 MiB to ``/v1/vector_stores/kb/files/import`` with a read-only key was a 403
    after the engine read (and parsed) all of it, its RSS up 600 MiB."""
    status, taken, grown = attack(engine, "/v1/vector_stores/kb/files/import", READER, 200 * MiB)
    assert status == 403
    assert taken < 32, "the engine read the body of a request it refused"
    assert grown < 50


def test_a_path_ending_in_import_has_the_default_body_limit(engine):
    """A writer may update a file's attributes there, but its body limit is the route's (32 MiB), not the
    index import's: the path's suffix chose the 64 GiB import limit before."""
    status, taken, grown = attack(engine, "/v1/vector_stores/kb/files/import", WRITER, 200 * MiB)
    assert status == 413
    assert taken < 32 + 32
    assert grown < 150  # at most the 32 MiB the route allows, read before the limit answered


def test_the_index_import_keeps_its_own_limit_and_still_refuses_readers_first(engine):
    status, taken, _ = attack(engine, "/indexes/kb2/import", READER, 64 * MiB)
    assert status == 403 and taken < 32
    status, _, _ = attack(engine, "/indexes/kb2/import", WRITER, 40 * MiB)
    assert status == 400  # not the 413 of the 32 MiB default: refused for what it is (not an export)


# --- import checks each document as POST /index does, and decompresses in bounded steps ----------------------
def _export_head(engine: EngineProcess) -> dict:
    """The header of an export of this engine's own model, so a crafted file keeps its vectors (no embedding)."""
    base, headers = engine.base_url, auth(ADMIN)
    if httpx.get(f"{base}/indexes/src/documents", headers=headers, timeout=60).status_code == 404:
        httpx.post(f"{base}/index", headers=headers, timeout=120, json={
            "index_name": "src", "documents": [{"doc_id": "a", "text": "The pump restarts after valve V-7 closes."}]
        }).raise_for_status()
    data = httpx.get(f"{base}/indexes/src/export", headers=headers, timeout=120).content
    return json.loads(gzip.decompress(data).split(b"\n", 1)[0])


def crafted(head: dict, docs: list[dict]) -> bytes:
    """An export file the engine's own writer makes of ``docs`` (a valid SHA-256: the file is whole, not good)."""
    writer = archive.ArchiveWriter()
    dim = head["embedding"]["dim"]
    for d in docs:
        d.setdefault("vectors", np.full((len(d["spans"]), dim), 0.1, dtype=np.float32))
    return writer.start(head) + writer.documents_batch(docs) + writer.finish()


def _import(engine: EngineProcess, index: str, data: bytes, key: str = WRITER) -> httpx.Response:
    return httpx.post(f"{engine.base_url}/indexes/{index}/import", content=data, timeout=300,
                      headers={**auth(key), "Content-Type": "application/gzip"})


def _doc(doc_id: str = "d", text: str = "Valve V-7 closes first.", **extra) -> dict:
    return {"id": doc_id, "text": text, "meta": {}, "spans": [[0, len(text)]], **extra}


@pytest.mark.parametrize(("name", "docs", "status", "words"), [
    ("too-long", [_doc(text="a" * 6_000_000)], 413, "the limit is 5000000"),
    ("duplicate-ids", [_doc("same"), _doc("same", "Another text.")], 400, "appears twice"),
    ("empty-id", [_doc("")], 400, "doc_id must be a non-empty string"),
    ("empty-text", [_doc(text="   ")], 400, "cannot be empty"),
    ("bad-span", [{**_doc(), "spans": [[5]]}], 400, "chunk span"),
    ("span-outside", [{**_doc(), "spans": [[0, 10_000]]}], 400, "chunk span"),
    ("bad-tokens", [_doc(tokens={"t": [1, 2, 3]})], 400, "token counts"),
    ("nan-vector", [_doc(vectors=np.full((1, 1), np.nan, dtype=np.float32))], 400, "not finite"),
])
def test_import_checks_each_document_as_index_does(engine, name, docs, status, words):
    """Issue 41: a 6M-character document that /index refuses with 413 was imported, and so were duplicate and
    empty ids; a bad span was a 500. Each is refused with /index's status, and no index is left."""
    head = _export_head(engine)
    if name == "nan-vector":
        docs[0]["vectors"] = np.full((1, head["embedding"]["dim"]), np.nan, dtype=np.float32)
    r = _import(engine, f"imp-{name}", crafted(head, [dict(d) for d in docs]))
    assert r.status_code == status, r.text
    assert words in r.json()["detail"]
    listed = httpx.get(f"{engine.base_url}/indexes", headers=auth(ADMIN), timeout=60).json()
    assert f"imp-{name}" not in listed
    if name == "too-long":  # the same document through /index: the same answer
        r = httpx.post(f"{engine.base_url}/index", headers=auth(WRITER), timeout=120,
                       json={"index_name": "imp-too-long", "documents": [{"text": "a" * 6_000_000}]})
        assert r.status_code == 413


def test_a_valid_crafted_import_still_goes_through(engine):
    head = _export_head(engine)
    text = "The cooling pump restarts after valve V-7 closes. Then the pressure settles."
    r = _import(engine, "imp-good", crafted(head, [_doc("one", text), _doc("two", "Chunks " + text,
                                                                          spans=[[0, 6], "Chunks alone."])]))
    assert r.status_code == 201, r.text
    assert r.json()["documents"] == 2 and r.json()["vectors"] == "reused"


def test_a_gzip_bomb_is_refused_in_bounded_memory(engine):
    """A 255 KB file that inflates to 250 MB of one line grew the engine's RSS by 420 MB before its 400."""
    head = _export_head(engine)
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = z.compress(json.dumps(head).encode() + b"\n")
    for _ in range(250):
        bomb += z.compress(b"x" * MiB)
    bomb += z.flush()
    before = peak_mib(engine.pid, reset=True)
    r = _import(engine, "imp-bomb", bomb)
    grown = peak_mib(engine.pid) - before
    print(f"gzip bomb: {len(bomb) / 1024:.0f} KB inflating to 250 MiB: {r.status_code}, peak RSS +{grown:.0f} MiB")
    assert r.status_code == 400 and "longer than" in r.json()["detail"], r.text
    assert grown < 120  # at most one line's worth (4 x 5M characters + the 32 MiB body limit), not 250 MiB


# --- the engine's environment is closed to processes of its uid ---------------------------------------------
def _read_environ_without_capabilities(pid: int) -> subprocess.CompletedProcess:
    """``cat /proc/<pid>/environ`` as this uid with no capabilities (a root test runner drops them first, so the
    reader is what a parser child of the engine is: the same uid, no CAP_SYS_PTRACE)."""
    return subprocess.run([*NO_CAPABILITIES, "cat", f"/proc/{pid}/environ"], capture_output=True, timeout=30)


def test_no_process_of_the_engines_uid_can_read_its_environment(engine):
    """Issue 41: a parser child could read ``/proc/<ppid>/environ`` (the admin key, the database URL). The
    engine is not dumpable: the kernel refuses that file to its uid without CAP_SYS_PTRACE."""
    with subprocess.Popen([*NO_CAPABILITIES, "sleep", "60"]) as control:  # dumpable, the same uid: readable
        try:
            readable = _read_environ_without_capabilities(control.pid)
        finally:
            control.kill()
    assert readable.returncode == 0 and b"PATH=" in readable.stdout, readable.stderr
    refused = _read_environ_without_capabilities(engine.pid)
    print(f"engine environ: exit {refused.returncode}, {len(refused.stdout)} bytes, {refused.stderr.decode().strip()}")
    assert refused.returncode != 0 and b"Permission denied" in refused.stderr
    assert ADMIN.encode() not in refused.stdout
    status = Path(f"/proc/{engine.pid}/status").read_text()  # the kubelet's and ps's view is unchanged
    assert "VmRSS" in status
