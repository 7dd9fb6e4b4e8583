"""bench/ is one package run from the repository's root (``python -m bench.X``, as ``make bench`` and
``make eval`` do): no script edits ``sys.path``, every benchmark ``run_all`` names is a module of the
package, and what the scripts share is defined once, in bench/common.py (issue 49)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from bench import run_all

BENCH = Path(__file__).resolve().parents[1] / "bench"
# bench/common.py's helpers, and the names their copies had in the scripts.
SHARED = {"pct", "status_kib", "rss_mib", "rss_mb", "_rss_kib", "machine", "write_result", "load_embedder"}


def sources() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(BENCH.parent)), ast.parse(p.read_text())) for p in sorted(BENCH.rglob("*.py"))]


def test_no_benchmark_edits_sys_path():
    uses = [f"{name}:{node.lineno}" for name, tree in sources() for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys"]
    assert uses == []


def test_shared_helpers_defined_once():
    copies = [f"{name}:{node.lineno} {node.name}" for name, tree in sources() if name != "bench/common.py"
              for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in SHARED]
    assert copies == []


def test_run_all_runs_modules_of_the_package():
    missing = [module for module in run_all.BENCHES.values() if importlib.util.find_spec(f"bench.{module}") is None]
    assert missing == []
