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
