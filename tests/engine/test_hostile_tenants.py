"""Issue 41, a hostile tenant against a real ``ragengine serve`` process: limits before work.

Body limits come before the body: a key may not make the engine read a body it will refuse. Memory is the
engine process's peak resident set (``VmHWM``, reset before each attack through ``/proc/<pid>/clear_refs``);
bytes read are the body bytes the socket took before the answer came (``push_body``: what the server read,
plus the kernel's buffers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.support.engine_process import EngineProcess, engine_process
from tests.support.hostile import push_body

MiB = 1024 * 1024
ADMIN = "admin-hostile-0123456789"
READER = "reader-hostile-0123456789"
WRITER = "writer-hostile-0123456789"
ACCESS = {"keys": [{"name": "reader", "key": READER, "indexes": ["*"], "role": "read"},
                   {"name": "writer", "key": WRITER, "indexes": ["*"], "role": "write"}]}


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EngineProcess:
    work = tmp_path_factory.mktemp("hostile")
    (work / "access.yaml").write_text(json.dumps(ACCESS))
    with engine_process(work, settings={"api_key": ADMIN, "access_file": str(work / "access.yaml")}) as proc:
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
