"""The engine's import layers, checked by walking every module's imports with ``ast``.

A module may import its own unit and units of lower layers only: no upward import, and no sideways
import between two units of one layer (``chat`` and ``conversations`` share what they both need
through ``rag``, never through each other). Imports inside functions count too.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import ragengine

PACKAGE = Path(ragengine.__file__).parent

# Lowest first. A unit is a module or package prefix; the longest prefix that matches a module wins.
LAYERS: list[tuple[str, ...]] = [
    ("ragengine", "ragengine.settings", "ragengine.redact"),
    ("ragengine.errors",),
    ("ragengine.formats",),  # every persistent format's version, and how a version on disk is judged
    ("ragengine.metrics",),
    ("ragengine.observability",),  # traces, request ids, log lines: every layer above opens spans
    ("ragengine.protocol",),
    ("ragengine.console",),  # the console's static files (read by api/console.py)
    ("ragengine.parsing",),  # the bounded parser (child processes with budgets)
    ("ragengine.access",),  # who may do what; the stores and sessions take its principals
    ("ragengine.rag.text", "ragengine.filetypes"),  # text primitives; files to documents
    ("ragengine.embedding", "ragengine.llm"),
    ("ragengine.retrieval",),
    ("ragengine.index",),
    ("ragengine.sample",),  # the bundled sample index, written through the index API
    ("ragengine.stores",),  # external vector stores: the index API over PostgreSQL / Milvus
    ("ragengine.versions",),  # index versions over either: re-index, swap, rollback, export / import
    ("ragengine.rag",),
    ("ragengine.guardrails",),  # the output policy and the screening the answers pass through
    ("ragengine.chat", "ragengine.conversations"),
    ("ragengine.evaluation",),  # golden sets scored on index versions (the runs live in the sessions' database)
    ("ragengine.vectorstores",),  # OpenAI's vector stores: indexes + the uploads and catalog in the session store
    ("ragengine.mcp",),  # the MCP server's tools and resources: indexes, access, the vector stores' descriptions
    ("ragengine.responses",),  # OpenAI's Responses: vector store search + chat's budget + the LLM
    ("ragengine.preflight",),  # the formats' check before anything starts: over the session store and the stores
    ("ragengine.api",),
    ("ragengine.services",),  # the services in dependency order, onto an app's state
    ("ragengine.handover",),  # a FAISS stand-by: reads at once, the services once the old process is gone
    ("ragengine.app",),
    ("ragengine.indexer",),  # ``ragengine index``: a folder's changed files to an index
    ("ragengine.cli",),
]
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYER_OF:
            return prefix
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, module: str, root: Path = PACKAGE.parent) -> list[tuple[int, str]]:
    """(line, module) for every ragengine module ``path`` imports; ``from ragengine import x`` names x."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "ragengine"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "ragengine":
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (root / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    root / Path(*candidate.split("."))).is_dir()
                out.append((node.lineno, candidate if is_module else base))
    return out


def violations(package: Path = PACKAGE) -> list[str]:
    """Every upward or sideways import in ``package`` (the installed ragengine, or a copy of it)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        unit = unit_of(module)
        for line, target in imported(path, module, package.parent):
            other = unit_of(target)
            if other == unit or LAYER_OF[other] < LAYER_OF[unit]:
                continue
            kind = "sideways" if LAYER_OF[other] == LAYER_OF[unit] else "upward"
            found.append(f"{path.relative_to(package.parent)}:{line}: {kind} import of {target} ({unit} -> {other})")
    return found


def test_no_upward_or_sideways_imports():
    assert violations() == []


def test_every_module_has_a_layer():
    for path in PACKAGE.rglob("*.py"):
        unit_of(module_name(path))


def test_the_check_sees_a_sideways_import(tmp_path):
    """The walk itself: an import from chat in conversations is reported (guards against a check that passes
    because it sees nothing). The probe goes into a copy of the package, never into the source tree."""
    copy = tmp_path / "ragengine"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(copy) == []  # the copy is walked like the original
    probe = copy / "conversations" / "_layer_probe.py"
    probe.write_text("def f():\n    from ragengine.chat.plan import split_messages\n    from ragengine import app\n")
    found = violations(copy)
    assert len(found) == 2, found
    assert any("_layer_probe.py:2: sideways import of ragengine.chat.plan" in v for v in found)
    assert any("_layer_probe.py:3: upward import of ragengine.app" in v for v in found)
