"""Stateless replicas: two real ``ragengine serve`` processes sharing one PostgreSQL + pgvector.

What one replica acknowledges, the other serves at once; a delete through one is gone in the other;
``kill -9`` of one in the middle of an ingestion loses no acknowledged document, and the other keeps
answering throughout.
"""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.support.engine_process import engine_processes


@pytest.fixture
def replicas(tmp_path, pgvector_url, store_prefix):
    """Two engines started side by side on one PostgreSQL schema: [(base URL, process), ...]."""
    settings = {"vector_store": "postgres", "vector_store_url": pgvector_url, "vector_store_prefix": store_prefix}
    with engine_processes([tmp_path / "a", tmp_path / "b"], settings=settings, llm=False) as engines:
        for engine in engines:
            assert httpx.get(f"{engine.base_url}/health").json()["status"] == "Healthy"
        yield [(engine.base_url, engine.process) for engine in engines]


def _ids(base: str, index: str) -> dict[str, str]:
    out: dict[str, str] = {}
    offset = 0
    while True:
        page = httpx.get(f"{base}/indexes/{index}/documents",
                         params={"limit": 100, "offset": offset, "max_text_length": 10_000}, timeout=30).json()
        out.update({d["doc_id"]: d["text"] for d in page["documents"]})
        offset += 100
        if offset >= page["total_items"]:
            return out


def test_write_through_one_replica_is_served_by_the_other(replicas):
    (a, _), (b, _) = replicas
    doc = {"doc_id": "gpu", "text": "The inference Deployment requests nvidia.com/gpu on GPU nodes.", "metadata": {"team": "ml"}}
    assert httpx.post(f"{a}/index", json={"index_name": "shared", "documents": [doc]}, timeout=60).status_code == 200
    hits = httpx.post(f"{b}/retrieve", json={"index_name": "shared", "query": "which nodes run inference?",
                                            "filters": {"type": "eq", "key": "team", "value": "ml"}}, timeout=60).json()
    assert [h["doc_id"] for h in hits["results"]] == ["gpu"]
    assert "shared" in httpx.get(f"{b}/indexes").json()
    r = httpx.post(f"{b}/index", json={"index_name": "shared", "documents": [{**doc, "text": "other"}]}, timeout=60)
    assert r.status_code == 409  # the document added through A is known to B's add check
    assert httpx.post(f"{b}/indexes/shared/documents/delete", json={"doc_ids": ["gpu"]}).json()["deleted_doc_ids"] == ["gpu"]
    hits = httpx.post(f"{a}/retrieve", json={"index_name": "shared", "query": "inference GPU nodes"}, timeout=60).json()
    assert hits["results"] == []
    assert httpx.delete(f"{a}/indexes/shared").status_code == 200
    assert httpx.post(f"{b}/retrieve", json={"index_name": "shared", "query": "x"}, timeout=60).status_code == 404


def test_kill_9_of_one_replica_mid_ingestion_loses_nothing_acknowledged(replicas):
    (a, proc_a), (b, _) = replicas
    acked: dict[str, str] = {}
    lock, stop = threading.Lock(), threading.Event()
    answers: list[int] = []

    def writer(worker: int) -> None:
        i = 0
        with httpx.Client(base_url=a, timeout=60) as client:
            while not stop.is_set():
                docs = [{"doc_id": f"w{worker}-{i}-{k}", "text": f"Worker {worker} wrote note {i}.{k} about zebra {i * 7 + k}."}
                        for k in range(3)]
                try:
                    resp = client.post("/index", json={"index_name": "durable", "documents": docs})
                except httpx.HTTPError:
                    return
                if resp.status_code == 200:
                    with lock:
                        acked.update({d["doc_id"]: d["text"] for d in docs})
                i += 1

    def reader() -> None:  # B answers all along, before and after A dies
        with httpx.Client(base_url=b, timeout=60) as client:
            while not stop.is_set():
                r = client.post("/retrieve", json={"index_name": "durable", "query": "zebra note"})
                answers.append(r.status_code)
                time.sleep(0.05)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 300
    while len(acked) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    read_thread = threading.Thread(target=reader)
    read_thread.start()
    proc_a.send_signal(signal.SIGKILL)
    proc_a.wait(10)
    after_kill = len(answers)  # B keeps answering after A is dead: wait for 20 more of its answers
    while len(answers) < after_kill + 20 and time.monotonic() < deadline and read_thread.is_alive():
        time.sleep(0.05)
    stop.set()
    for t in [*threads, read_thread]:
        t.join(60)
    assert len(acked) >= 30, f"only {len(acked)} writes acknowledged before the kill"
    stored = _ids(b, "durable")
    missing = [d for d in acked if d not in stored]
    assert not missing, f"{len(missing)} acknowledged documents lost, e.g. {missing[:5]}"
    assert all(stored[d] == text for d, text in acked.items())
    assert len(answers) >= after_kill + 20 and set(answers) == {200}, f"replica B answered {sorted(set(answers))}"
