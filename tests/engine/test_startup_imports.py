"""Start-up stays light: importing the app and restoring indexes never imports llama-index (seconds of
import); only the first text longer than one chunk does (docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import ragengine.app
from ragengine.embedding import build_embedder
from ragengine.index.chunking import Chunker
from ragengine.index.types import ChunkingConfig
from ragengine.settings import EngineSettings

chunker = Chunker(build_embedder(EngineSettings()), ChunkingConfig())  # what restoring an index makes
loaded = sorted({m.split(".")[0] for m in sys.modules if m.startswith("llama_index")})
assert not loaded, loaded
assert chunker.split("One sentence. Another one.", {}) == [(0, 26)]  # fits one chunk: no splitter needed
assert not any(m.startswith("llama_index") for m in sys.modules)
long = " ".join(f"Sentence number {i} says something about pumps." for i in range(400))
assert len(chunker.split(long, {})) > 1
assert "llama_index.core" in sys.modules  # the first text longer than a chunk imports the splitters
"""


def test_app_import_and_restore_do_not_import_llama_index():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


LAZY_MCP = """
import sys, tempfile
from fastapi.testclient import TestClient
from ragengine.app import create_app
from ragengine.settings import EngineSettings

with tempfile.TemporaryDirectory() as data, TestClient(create_app(EngineSettings(data_dir=data))) as client:
    assert client.get("/health").status_code == 200
    assert "mcp" not in sys.modules, "the MCP SDK was imported by the start-up"
    r = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        headers={"accept": "application/json, text/event-stream", "host": "localhost:8000"})
    assert r.status_code == 200, (r.status_code, r.text)
    assert "mcp" in sys.modules
"""


def test_the_mcp_sdk_is_imported_by_the_first_mcp_request_not_by_the_start_up():
    """Issue 45: an engine no agent talks to does not pay the SDK's import (a second or two, ~30 MiB)."""
    result = subprocess.run([sys.executable, "-c", LAZY_MCP], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


# What a FAISS engine with a plain configuration (no PDF/office/OCR document, no Milvus or PostgreSQL, no tracing
# endpoint, no guardrails policy or access file, no agent on /mcp) must not import, at start-up nor on its first
# requests, nor when it restarts on what it wrote (docs/performance.md, "What a FAISS engine loads").
NOT_LOADED = """
import sys, tempfile
from fastapi.testclient import TestClient
from ragengine.app import create_app
from ragengine.settings import EngineSettings

UNUSED = {
    "pymilvus", "psycopg", "pgvector",  # the external stores
    "pdfplumber", "pdfminer", "pypdf", "pypdfium2", "pytesseract", "docx", "pptx", "openpyxl",  # documents, OCR
    "alembic", "mako",  # the session store's migrations: a new database is made from the models, a current one kept
    "opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation",  # tracing (FastAPI itself imports the API)
    "regex", "detect_secrets", "json_repair", "tiktoken", "yaml",  # a guardrails policy, an access file
    "mcp", "llama_index", "tree_sitter_language_pack",  # /mcp; splitters of texts longer than one chunk, of code
    "torch", "transformers", "sentence_transformers", "onnxruntime",  # the OpenVINO export serves the embedding
    "hypothesis", "kopf", "kubernetes",
}


def loaded() -> list[str]:
    return sorted(m for m in sys.modules if any(m == u or m.startswith(u + ".") for u in UNUSED))


with tempfile.TemporaryDirectory() as data:
    for start in ("new data folder", "restart on it"):
        with TestClient(create_app(EngineSettings(data_dir=data))) as client:
            assert client.get("/health").status_code == 200
            assert not loaded(), (start, "at /health", loaded())
            if start == "new data folder":
                assert "faiss" not in sys.modules  # no index yet: FAISS loads with the first one (index/store.py)
                r = client.post("/index", json={"index_name": "t", "documents": [{"text": "Pumps move water."}]})
                assert r.status_code == 200, r.text
                assert "faiss" in sys.modules
            r = client.post("/retrieve", json={"index_name": "t", "query": "what moves water?"})
            assert r.status_code == 200 and r.json()["results"], r.text
            assert not loaded(), (start, "after /index and /retrieve", loaded())
"""


def test_a_plain_faiss_engine_imports_nothing_its_configuration_does_not_use():
    """Issue 45: peak RSS and start-up. Each module set here loads where its feature is first used (a policy, an
    access file, a migration to run, a document of that format, a store, an agent), never in an engine without it."""
    result = subprocess.run([sys.executable, "-c", NOT_LOADED], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


CLI_BEFORE_SERVE = """
import sys
import ragengine.cli
loaded = sorted(m for m in ("fastapi", "httpx", "numpy", "ragengine.evaluation.cli", "ragengine.cli.archive")
                if m in sys.modules)
assert not loaded, loaded
from click.testing import CliRunner
listing = CliRunner().invoke(ragengine.cli.main, ["--help"]).output
assert all(name in listing for name in ("eval", "export", "import", "index", "migrate", "serve")), listing
assert "Score INDEX on a golden set" in CliRunner().invoke(ragengine.cli.main, ["eval", "--help"]).output
"""


def test_the_cli_imports_its_commands_modules_only_when_they_run():
    """``ragengine serve`` starts loading the embedding model once its settings are read (embedding/early.py).
    The ``eval``, ``export`` and ``import`` commands' modules (FastAPI among their imports) used to be imported
    before that, with ``ragengine.cli`` itself: the model's load started most of a second later. They are listed
    and run as before."""
    result = subprocess.run([sys.executable, "-c", CLI_BEFORE_SERVE], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
