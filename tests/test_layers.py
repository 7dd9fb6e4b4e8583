"""The packages' import layers: the contracts of ``.importlinter`` (import-linter), kept by every module.

``make lint`` runs ``lint-imports`` too; this test makes ``make test`` enforce the same contracts (the layers, and
no import circle inside a package). The second test guards the check itself (a check that passes because it sees
nothing): a copy of both packages with probes that break each contract must fail, naming every probe.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import ragengine
import ragengine_operator

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = ROOT / ".importlinter"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = (Path(ragengine.__file__).parent, Path(ragengine_operator.__file__).parent)


def lint_imports(paths: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the packages found first on ``paths``, with the repository's contracts."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(CONTRACTS), "--no-cache"], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_the_contracts_are_kept():
    done = lint_imports([p.parent for p in PACKAGES], ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in done.stdout


def test_the_contracts_see_every_kind_of_broken_import(tmp_path):
    copy = tmp_path / "src"
    for package in PACKAGES:
        shutil.copytree(package, copy / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "ragengine" / "conversations" / "_probe.py").write_text(
        "def f():\n    from ragengine.chat.plan import split_messages\n    from ragengine import app\n")
    (copy / "ragengine" / "index" / "_probe.py").write_text("import ragengine_operator.constants\n")
    (copy / "ragengine_operator" / "net" / "_probe.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ragengine_operator.controller import Controller\n")
    (copy / "ragengine_operator" / "sources" / "_probe.py").write_text("import kubernetes\n")
    (copy / "ragengine_operator" / "unplaced.py").write_text("")
    (copy / "ragengine" / "embedding" / "_probe_a.py").write_text("def f():\n    from ragengine.embedding import _probe_b\n")
    (copy / "ragengine" / "embedding" / "_probe_b.py").write_text("from ragengine.embedding import _probe_a\n")
    done = lint_imports([copy], tmp_path)
    out = " ".join(done.stdout.split())  # the report wraps long lines
    assert done.returncode != 0, out
    assert "Contracts: 0 kept, 5 broken." in out, out
    for line in ("ragengine.conversations._probe -> ragengine.chat.plan (l.2)",  # sideways
                 "ragengine.conversations._probe -> ragengine.app (l.3)",  # upward, inside a function
                 "ragengine.index._probe -> ragengine_operator.constants (l.1)",  # the engine over the operator
                 "ragengine_operator.net._probe -> ragengine_operator.controller (l.3)",  # upward, for types only
                 "ragengine_operator.sources._probe -> kubernetes (l.1)",  # the worker and the Kubernetes client
                 "- ragengine_operator.unplaced",  # a module in no layer
                 "No cycles are allowed in ragengine.embedding."):  # a circle inside one layer
        assert line in out, (line, out)
