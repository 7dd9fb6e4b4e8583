"""``kill -9`` inside each admin operation that replaces or drops data, on each store: after a restart the
old state or the new one is there whole, never a mix, never nothing, and nothing is left behind that no
version refers to (issue 47; docs/engine.md, "Admin operations that replace data").

Each point is a real process killed by SIGKILL at an exact step (``tests/support/crash_points.py``: a fork
server, so a point costs a fork, not an interpreter start): in-process failures would prove less, as an
exception runs the ``except`` and ``finally`` clean-ups a real crash never runs (the import's removal of
its hidden index, for one). The restart is another process on the same data, which resumes what a crash
interrupted (an activation's job, an index's delete) before it is inspected.

On FAISS and PostgreSQL: Milvus Lite (a development tool, docs/stores.md) starts a server of its own in
each process, about ten seconds a start on two cores, which would make these forty seconds a point; its
book writes take no lock across processes, and the steps of the version layer over it are the ones these
runs prove.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.crash_points import CHANGED, DOCS
from tests.support.engine_process import REPO, engine_env
from tests.support.stores import store_values

MODEL = "wordllama:l2_supercat"  # numpy only: safe to load before forking
FULL = sorted([d["doc_id"], d["text"]] for d in DOCS)  # as JSON brings them back
CHANGED_FULL = sorted([d["doc_id"], d["text"]] for d in CHANGED)


class ForkServer:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def ask(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the fork server exited ({self.proc.poll()})"
        return json.loads(line)


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.crash_points", MODEL], cwd=REPO, env=engine_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        server = ForkServer(proc)
        assert proc.stdout is not None and json.loads(proc.stdout.readline()) == {"ready": True}
        yield server
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        if proc.poll() is None:
            proc.kill()


# (operation, kill point, the state a restart must find: "old" or "new"); /load is the embedded store's
LOAD_POINTS = [
    ("load", {"at": "os.replace", "when": "before", "nth": 1}, "old"),  # the copy's folder half made
    ("load", {"at": "os.replace", "when": "before", "nth": 2}, "old"),  # its snapshot half written
    ("load", {"at": "inner.load", "when": "after"}, "old"),  # the copy complete, hidden
    ("load", {"at": "books.update", "when": "after"}, "new"),  # swapped in, the old versions not dropped
    ("load", {"at": "inner.delete_index", "when": "after"}, "new"),  # one old version dropped of two
    # /persist over an earlier copy, between its two renames (the copy moved aside, the new one not in place)
    ("persist", {"at": "os.replace", "when": "before", "nth": 2}, "old"),
    ("persist", {"at": "os.replace", "when": "after", "nth": 2}, "new"),
]
POINTS = [
    ("import", {"at": "inner.import_batch", "when": "after", "nth": 2}, "old"),  # half imported, hidden
    ("import", {"at": "books.update", "when": "before"}, "old"),  # all imported, not yet visible
    ("import", {"at": "books.update", "when": "after"}, "new"),
    ("activate", {"at": "books.update", "when": "after"}, "new"),  # the job started: the restart resumes it
    ("activate", {"at": "books.update", "when": "after", "live": 1}, "new"),  # swapped in one book write
    ("drop_version", {"at": "books.update", "when": "before"}, "old"),
    ("drop_version", {"at": "books.update", "when": "after"}, "new"),  # gone from the book, its data not yet
    ("delete", {"at": "books.update", "when": "after"}, "new"),  # marked deleting: the restart finishes it
    ("delete", {"at": "inner.delete_index", "when": "after"}, "new"),  # one version dropped of two
]


def _params(points: list) -> list:
    return [pytest.param(op, kill, expect, id=f"{op}-{kill['when']}-{kill['at']}-{kill.get('nth', kill.get('live', 1))}")
            for op, kill, expect in points]


def _check(op: str, expect: str, state: dict, kind: str) -> None:
    indexes = state["indexes"]
    leftovers = set(state["physical"]) - set(state["referenced"])
    if kind != "faiss":  # on a shared store an import may be under way on another replica: dropped after a day
        leftovers = {p for p in leftovers if not p.startswith("imported/import-")}
    assert not leftovers, f"physical indexes no version refers to: {leftovers}"
    if op == "delete":
        assert "kb" not in indexes, indexes
        return
    kb = indexes["kb"]
    assert kb["job"] in (None, "succeeded"), kb
    if op == "load":
        assert (kb["documents"], kb["versions"]) == ((FULL, [1]) if expect == "new" else (CHANGED_FULL, [1, 2]))
        return
    if op == "persist":  # the index as it was; the copy the one before or the new one, whole
        assert kb["documents"] == CHANGED_FULL
        assert indexes["from-copy"]["documents"] == (CHANGED_FULL if expect == "new" else FULL)
        return
    assert kb["documents"] == FULL
    if op == "import":
        assert ("imported" in indexes) == (expect == "new"), indexes
        if expect == "new":
            assert indexes["imported"]["documents"] == FULL
    elif op == "activate":
        assert (kb["live"], kb["versions"]) == (1, [1, 2]), kb
    elif op == "drop_version":
        assert kb["versions"] == ([2] if expect == "new" else [1, 2]), kb


def _crash_and_restart(forks: ForkServer, store: str, op: str, kill: dict, work: Path, request) -> dict:
    values = {"data_dir": str(work / "data"), "embedding_model": MODEL, "reindex_lease_s": 1.0,
              **store_values(store, prefix=f"crash{os.getpid()}_{time.monotonic_ns()}", work_dir=work,
                             pg_url=lambda: request.getfixturevalue("pgvector_url"))}
    done = forks.ask({"run": op, "settings": values, "kill": kill})
    assert done == {"signal": 9}, f"the process was not killed at {kill}: {done}"
    restarted = forks.ask({"inspect": True, "settings": values, "answer_to": str(work / "state.json"),
                           **({"copy": "copy"} if op == "persist" else {})})
    assert restarted.get("exit") == 0, restarted
    return restarted["state"]


@pytest.mark.stores("faiss")
@pytest.mark.parametrize(("op", "kill", "expect"), _params(LOAD_POINTS))
def test_a_kill_inside_a_load_or_a_persist_leaves_the_old_state_or_the_new_one(forks, vector_store, op, kill, expect,
                                                                              tmp_path: Path, request):
    _check(op, expect, _crash_and_restart(forks, vector_store, op, kill, tmp_path, request), vector_store)


@pytest.mark.stores("faiss", "postgres")
@pytest.mark.parametrize(("op", "kill", "expect"), _params(POINTS))
def test_a_kill_inside_an_admin_operation_leaves_the_old_state_or_the_new_one(forks, vector_store, op, kill, expect,
                                                                             tmp_path: Path, request):
    _check(op, expect, _crash_and_restart(forks, vector_store, op, kill, tmp_path, request), vector_store)
