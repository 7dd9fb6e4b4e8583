"""Durability: kill -9 the real ``ragengine serve`` mid-ingestion; every acknowledged write survives."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.support.engine_process import engine_process

# Small snapshot threshold (20 kB) so snapshots + journal resets happen during the run too.
SETTINGS = {"snapshot_journal_bytes": "20000"}


def test_kill_9_mid_ingestion_loses_no_acknowledged_write(tmp_path: Path):
    acked: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()
    with engine_process(tmp_path, settings=SETTINGS, llm=False) as engine:
        base = engine.base_url

        def writer(worker: int) -> None:
            i = 0
            with httpx.Client(base_url=base, timeout=30) as client:
                while not stop.is_set():
                    docs = [{"doc_id": f"w{worker}-{i}-{k}", "text": f"Worker {worker} document {i}.{k} about zebra {i * 7 + k}.",
                             "metadata": {"worker": worker, "i": i}} for k in range(3)]
                    try:
                        resp = client.post("/index", json={"index_name": "durable", "documents": docs})
                    except httpx.HTTPError:
                        return
                    if resp.status_code == 200:
                        with lock:
                            for d in docs:
                                acked[d["doc_id"]] = d["text"]
                    i += 1

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        try:
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while len(acked) < 90 and time.monotonic() < deadline:
                time.sleep(0.05)
            engine.process.send_signal(signal.SIGKILL)  # mid-ingestion: writers are still sending
            engine.process.wait(10)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
    assert len(acked) >= 90, f"only {len(acked)} writes acknowledged before the kill"

    with engine_process(tmp_path, settings=SETTINGS, llm=False) as engine:  # the same data folder
        base = engine.base_url
        listed: dict[str, str] = {}
        offset = 0
        while True:
            page = httpx.get(f"{base}/indexes/durable/documents",
                             params={"limit": 100, "offset": offset, "max_text_length": 10_000}).json()
            listed.update({d["doc_id"]: d["text"] for d in page["documents"]})
            offset += 100
            if offset >= page["total_items"]:
                break
        missing = [d for d in acked if d not in listed]
        assert not missing, f"{len(missing)} acknowledged documents lost, e.g. {missing[:5]}"
        assert all(listed[d] == t for d, t in acked.items())
        # ... and retrievable: a sample of acknowledged documents comes back for its own text.
        for doc_id in list(acked)[:: max(1, len(acked) // 10)]:
            hits = httpx.post(f"{base}/retrieve", json={"index_name": "durable", "query": acked[doc_id],
                                                         "max_node_count": 5}).json()["results"]
            assert doc_id in [h["doc_id"] for h in hits], doc_id


def _listed(base: str) -> set[str]:
    return {d["doc_id"] for d in httpx.get(f"{base}/indexes/durable/documents", params={"limit": 100}).json()["documents"]}


def test_a_replacement_process_waits_for_the_old_one_and_loses_no_write(tmp_path: Path):
    """A deleted pod's replacement starts while the old process still stops, on the same volume. It must
    not write until the old one is gone: the old one's last snapshot puts a fresh journal in place, and writes
    the new one had appended to the journal it opened before would be lost at its next restart (CI saw
    exactly that on the node). It serves reads meanwhile, as a stand-by, and holds its writes (issue 48)."""
    with engine_process(tmp_path, settings=SETTINGS, llm=False) as old:
        before = {"doc_id": "before", "text": "Written by the process that is about to be replaced."}
        assert httpx.post(f"{old.base_url}/index", json={"index_name": "durable", "documents": [before]},
                          timeout=30).status_code == 200
        with engine_process(tmp_path, settings=SETTINGS, llm=False) as new:
            assert httpx.get(f"{new.base_url}/health", timeout=10).json()["handover"]["role"] == "standby"
            assert _listed(new.base_url) == {"before"}  # reads at once, from the folder as the old one left it
            held = {"doc_id": "held", "text": "Sent to the replacement while the old process still writes."}
            with ThreadPoolExecutor(1) as pool:
                write = pool.submit(httpx.post, f"{new.base_url}/index",
                                    json={"index_name": "durable", "documents": [held]}, timeout=120)
                time.sleep(1.0)
                assert not write.done(), write.result().text  # held: the old process still holds the folder
                old.process.send_signal(signal.SIGTERM)  # the old pod stops: its final snapshot, a fresh journal
                assert old.process.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its shutdown
                assert write.result().status_code == 200  # then it goes through, to the new writer
            after = {"doc_id": "after", "text": "Written by the replacement once it took the folder."}
            assert httpx.post(f"{new.base_url}/index", json={"index_name": "durable", "documents": [after]},
                              timeout=30).status_code == 200
            assert _listed(new.base_url) == {"before", "held", "after"}
            new.process.send_signal(signal.SIGKILL)  # acknowledged, then killed: the journal must have them
            new.process.wait(10)
    with engine_process(tmp_path, settings=SETTINGS, llm=False) as third:
        assert _listed(third.base_url) == {"before", "held", "after"}
