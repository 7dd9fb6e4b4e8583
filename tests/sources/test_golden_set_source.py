"""spec.evaluation.goldenSet.source: the sync hands a git source's golden set file to a real engine (FAISS)
instead of indexing it; the engine's evaluation file names that source, and its set is the one handed over."""

from __future__ import annotations

import json
import time

import httpx

from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.sync import fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.support.embedding import borrowed
from tests.support.git_server import Repo, git_http_server
from tests.support.golden import DOCS, questions
from tests.support.server import serve_app

from .test_git_sync import LOOPBACK

GOLDEN = "eval/golden.jsonl"


def test_the_sync_hands_the_golden_set_to_the_engine_and_does_not_index_it(embedder, tmp_path):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    config = tmp_path / "evaluation.json"
    config.write_text(json.dumps({"index": "kb", "topK": 5, "goldenSetSource": {"name": "facts", "path": GOLDEN}}))
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    for name, text in DOCS.items():
        repo.write(f"{name}.md", text)
    repo.write(GOLDEN, "\n".join(json.dumps(q) for q in questions("facts:")) + "\n")
    first = repo.commit("facts and their golden set")
    app = create_app(EngineSettings(data_dir=tmp_path / "data", evaluation_file=config))
    with borrowed(embedder) as own, git_http_server(root) as git, serve_app(app) as base:
        app.state.embedder = own
        source = Source.model_validate({"name": "facts", "index": "kb", "git": {"url": f"{git}/docs.git"}})
        client = EngineClient(base)

        def sync(previous: str | None = None):
            return sync_source(source, client, lambda: fetch(source, cache=tmp_path / "cache", secret=None,
                                                             previous_revision=previous, previous_validators=None,
                                                             policy=LOOPBACK, golden_set_path=GOLDEN),
                               previous, golden_set_path=GOLDEN)

        result = sync()
        assert result.ok and result.revision == first, result.message
        assert result.message.endswith(f"; golden set {GOLDEN}: 16 questions handed to the engine"), result.message
        docs = httpx.get(f"{base}/indexes/kb/documents", params={"limit": 100}).json()
        assert docs["total_items"] == 16 and f"facts:{GOLDEN}" not in {d["doc_id"] for d in docs["documents"]}
        held = httpx.get(f"{base}/indexes/kb/evaluations/golden-set").json()
        assert held == {"index": "kb", "source": "facts", "path": GOLDEN, "revision": first, "questions": 16}
        deadline = time.monotonic() + 30  # the engine's evaluation file now has its set
        while (configured := httpx.get(f"{base}/health").json()["evaluation"].get("configured", {})).get(
                "questions") != 16:
            assert time.monotonic() < deadline, configured
            time.sleep(0.2)
        assert configured["error"] is None and configured["index"] == "kb"

        repo.write(GOLDEN, '{"id": "q1", "question": "", "relevant_doc_ids": ["facts:heart.md"]}\n')
        second = repo.commit("a broken golden set")
        result = sync(first)
        assert result.ok and result.revision == second  # the documents still sync
        assert f"golden set {GOLDEN} refused by the engine: line 1 of the golden set: question" in result.message
        assert httpx.get(f"{base}/indexes/kb/evaluations/golden-set").json()["revision"] == first  # the good one stays
        client.close()
