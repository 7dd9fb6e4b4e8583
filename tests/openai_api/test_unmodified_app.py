"""docs/openai.md says an app moving from OpenAI changes its base URL and nothing else: this runs an app
written for OpenAI (``app/file_search_app.py``) unmodified, in its own process, against a real engine,
configured only through the SDK's standard environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.openai_api.conftest import API_KEY, KAITO, SOUP

APP = Path(__file__).parent / "app" / "file_search_app.py"


def test_the_app_knows_nothing_of_the_engine():
    source = APP.read_text()
    for engine_specific in ("base_url", "extra_body", "extra_query", "index_name", "ragengine", "localhost", "127.0.0.1"):
        assert engine_specific not in source.split('"""', 2)[2], engine_specific


def test_an_app_written_for_openai_runs_unmodified(engine, tmp_path):
    engine.llm.reply = "KAITO is a Kubernetes operator that automates AI model deployment [1]."
    files = []
    for name, text in (KAITO, SOUP):
        (tmp_path / name).write_text(text)
        files.append(str(tmp_path / name))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(OPENAI_BASE_URL=f"{engine.base}/v1", OPENAI_API_KEY=API_KEY)
    run = subprocess.run([sys.executable, str(APP), *files], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout)
    assert out["batch"] == ["completed", 2]
    assert out["top_hit"] == "kaito.md"
    assert out["answer"].startswith("KAITO is a Kubernetes operator") and "[1]" not in out["answer"]
    assert out["cited"] == ["kaito.md"] and out["hits"][0] == "kaito.md"
    assert out["follow_up"] is True
