"""The previous release of this repository, for the upgrade tests (issue 48).

Its commit is pinned in one place, ``hack/previous-release.env`` (``PREVIOUS_RELEASE=<commit>``), which the Helm
upgrade test reads too (that release's chart and images). ``checkout()`` materialises the commit once as a detached
git worktree under ``.cache/previous-release/`` (the repository's ignored cache folder) and reuses it on later runs
while it is at that commit. A clone without the commit (a shallow CI clone) is a failure that says how to fetch it,
never a skip: these tests are the proof that a newer engine reads an older one's data.

``engine_process(work_dir, ...)`` starts that release's ``ragengine serve``: ``tests.support.engine_process`` with
the release's ``engine/`` first on the path and this venv's Python (the release must run on this venv's packages;
when a release changes them, the pin's tests say which import fails).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.engine_process import REPO, EngineProcess
from tests.support.engine_process import engine_process as _engine_process

PIN = REPO / "hack" / "previous-release.env"
CACHE = REPO / ".cache" / "previous-release"


def commit() -> str:
    """The pinned commit (``PREVIOUS_RELEASE=`` in hack/previous-release.env)."""
    for line in PIN.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PREVIOUS_RELEASE" and value.strip():
            return value.strip()
    raise RuntimeError(f"{PIN} names no PREVIOUS_RELEASE=<commit>")


def _git(*args: str, cwd: Path = REPO, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check, timeout=300)


def checkout() -> Path:
    """The previous release's source tree (a detached worktree of this clone), made on first use."""
    sha = commit()
    path = CACHE / sha[:12]
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # one test session at a time makes it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (path / ".git").exists() and _git("rev-parse", "HEAD", cwd=path, check=False).stdout.strip() == sha:
            return path
        if _git("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode != 0:
            raise RuntimeError(f"the previous release's commit {sha} (hack/previous-release.env) is not in this clone: "
                               "run `git fetch --unshallow` (a shallow clone), or `git fetch origin "
                               f"{sha}`, then run the tests again")
        if path.exists():  # another commit's worktree, or a broken one: made again
            _git("worktree", "remove", "--force", str(path), check=False)
            if path.exists():
                shutil.rmtree(path)
        _git("worktree", "prune")
        _git("worktree", "add", "--detach", str(path), sha)
        return path


@contextlib.contextmanager
def engine_process(work_dir: Path, **kwargs) -> Iterator[EngineProcess]:
    """The previous release's engine (and this checkout's test LLM) on ``work_dir``; as engine_process's."""
    with _engine_process(work_dir, source=checkout(), **kwargs) as engine:
        yield engine
