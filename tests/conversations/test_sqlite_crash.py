"""The default single-pod setup, crashed: sessions, messages and uploads on SQLite (``<data_dir>/sessions.db``)
and FAISS, in a real ``ragengine serve`` process that is killed with SIGKILL while clients are writing, then
restarted on the same data folder. Nothing the engine acknowledged is lost:

- every session answered 201 exists after the restart;
- every message exchange answered 200 is in its session's history, user message then reply, in order;
- every upload answered 202 is ingested after the restart (its job, left ``uploaded`` or ``processing`` by
  the crash, is taken up again), once: its documents are listed exactly once.

kill -9 keeps the page cache, so this checks the process-crash half; tests/engine/test_fsync.py checks that
each of these writes was fsync'ed before the answer (the power-loss half).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx

from tests.support.engine_process import engine_process

WRITERS = 3
ACKED_BEFORE_KILL = 30  # exchanges and uploads acknowledged before the kill: the crash lands mid-traffic


def _notes(topic: str) -> str:
    return "\n\n".join(f"The {topic} log, entry {i}: the {topic} reading was {i * 7} units." for i in range(30))


def test_kill_9_loses_no_acknowledged_session_message_or_upload(tmp_path: Path):
    sessions: set[str] = set()
    exchanges: dict[str, list[tuple[str, str]]] = {}  # session -> [(user text, reply text)] acknowledged
    uploads: dict[str, str] = {}  # file id -> topic
    lock = threading.Lock()
    enough, stop = threading.Event(), threading.Event()

    def acked() -> int:
        return sum(len(v) for v in exchanges.values()) + len(uploads)

    def writer(worker: int, base: str) -> None:
        with httpx.Client(base_url=base, timeout=60) as client:
            try:
                r = client.post("/v1/sessions", json={"title": f"writer {worker}"})
                if r.status_code != 201:
                    return
                sid = r.json()["id"]
                with lock:
                    sessions.add(sid)
                    exchanges[sid] = []
                i = 0
                while not stop.is_set():
                    if i % 4 == 3:
                        topic = f"pump{worker}x{i}"
                        r = client.post("/v1/files", files={"file": (f"{topic}.txt", _notes(topic).encode(), "text/plain")})
                        if r.status_code == 202:
                            with lock:
                                uploads[r.json()["file_id"]] = topic
                    else:
                        text = f"writer {worker} question {i}: what is the reading?"
                        r = client.post(f"/v1/sessions/{sid}/messages", json={"content": text, "mode": "none"})
                        if r.status_code == 200:
                            with lock:
                                exchanges[sid].append((text, r.json()["assistant_message"]["content"]))
                    with lock:
                        if acked() >= ACKED_BEFORE_KILL:
                            enough.set()
                    i += 1
            except httpx.HTTPError:
                return  # the engine died under this request: it was never acknowledged

    with engine_process(tmp_path) as engine:
        threads = [threading.Thread(target=writer, args=(w, engine.base_url)) for w in range(WRITERS)]
        try:
            for t in threads:
                t.start()
            assert enough.wait(300), f"only {acked()} writes acknowledged"
            engine.process.send_signal(signal.SIGKILL)  # the writers are still sending
            engine.process.wait(10)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
    assert acked() >= ACKED_BEFORE_KILL and uploads and all(exchanges.values())

    with engine_process(tmp_path) as engine, httpx.Client(base_url=engine.base_url, timeout=60) as client:
        for sid in sessions:
            assert client.get(f"/v1/sessions/{sid}").status_code == 200, sid
            history = client.get(f"/v1/sessions/{sid}/messages").json()["data"]
            stored = [(m["role"], m["content"]) for m in history]
            wanted = [pair for user, reply in exchanges[sid] for pair in (("user", user), ("assistant", reply))]
            # the acknowledged exchanges, in order; an unacknowledged one may follow (answered, reply lost)
            assert stored[: len(wanted)] == wanted, (sid, stored, wanted)
        deadline = time.monotonic() + 300
        for file_id, topic in uploads.items():
            while (info := client.get(f"/v1/files/{file_id}").json())["ingestion_status"] != "completed":
                assert info["ingestion_status"] in ("uploaded", "processing"), info
                assert time.monotonic() < deadline, f"{file_id} still {info['ingestion_status']} after the restart"
                time.sleep(0.1)
            docs = client.get("/indexes/conversations/documents", params={
                "limit": 100, "metadata_filter": json.dumps({"file_id": file_id}), "max_text_length": 100_000}).json()
            ids = [d["doc_id"] for d in docs["documents"]]
            assert ids and len(ids) == len(set(ids)) == info["documents"], (file_id, ids, info)
            assert all(topic in d["text"] for d in docs["documents"]), file_id
