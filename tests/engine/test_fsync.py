"""Power-loss durability, observed: the engine process runs under ``strace``, and every acknowledged write
must have its journal fsync'ed (the call returned 0) before the response is written to the socket.

``kill -9`` (test_durability.py, test_sessions_crash.py) keeps the page cache, so it cannot tell whether a
write was ever flushed to the disk: removing every ``os.fsync`` would pass those tests. This one reads
the system calls instead (Debian's strace, ``hack/install-system.sh``):

- FAISS: ``POST /index`` writes the record to ``<index>/journal.log``; the journal's fsync completes, then
  ``HTTP/1.1 200`` goes out.
- SQLite sessions (the default store): ``POST /v1/sessions`` and a message commit into ``sessions.db``
  in WAL mode; the WAL's fsync completes, then ``HTTP/1.1 201`` / ``200`` goes out.
- Uploads (SQLite sessions, the default): ``POST /v1/files`` stores the bytes under ``uploads/`` for the
  ingestion job; the file and its folder are fsync'ed, then ``HTTP/1.1 202`` goes out.

Each response is matched to its request by the client's own port (strace ``-yy`` names both ends of a
TCP socket), and the journal writes and fsync are looked for between the previous response the engine
wrote and this one. The order of lines in strace's log is the order of the calls: a thread stopped at a
call's return cannot wake the event loop that writes the response before strace has logged it.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.engine_process import engine_process

CALLS = "fsync,fdatasync,write,writev,pwrite64,pwritev,sendto,sendmsg"


@dataclass
class Call:
    line: int  # where the call started in the log (its completion may come later, "resumed")
    done: int  # where its result was logged
    name: str
    fd: str  # strace -yy: the path, or TCP:[local->peer]
    data: str
    result: str


_LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((\d+)<(\w+:\[[^\]]*\]|[^>]*)>(.*))$")
_RESULT = re.compile(r"^(.*)\)\s+=\s+(-?\d+)(?:\s.*)?$")
_UNFINISHED = " <unfinished ...>"


def calls(log: Path) -> list[Call]:
    """The traced calls of strace ``-f -yy`` output (``name(fd<path>, data...) = result``), joining a call
    left ``<unfinished ...>`` by another thread's line with its ``<... name resumed>`` line."""
    out: list[Call] = []
    pending: dict[tuple[str, str], Call] = {}
    for i, raw in enumerate(log.read_text(errors="replace").splitlines()):
        line = _LINE.match(raw)
        if not line:
            continue
        pid, resumed_name, resumed_rest, name, _fd, fd, rest = line.groups()
        if resumed_name:
            call = pending.pop((pid, resumed_name), None)
            ended = _RESULT.match(resumed_rest)
            if call is not None and ended:
                call.done, call.data, call.result = i, call.data + ended.group(1), ended.group(2)
                out.append(call)
            continue
        data = rest.removeprefix(", ")
        if data.endswith(_UNFINISHED):
            pending[(pid, name)] = Call(i, i, name, fd, data.removesuffix(_UNFINISHED), "")
            continue
        ended = _RESULT.match(data)
        if ended:
            out.append(Call(i, i, name, fd, ended.group(1), ended.group(2)))
    return sorted(out, key=lambda c: c.line)


def _reply(trace: list[Call], client_port: int, status: str) -> Call | None:
    for call in trace:
        if call.fd.startswith("TCP:") and call.fd.endswith(f":{client_port}]") and call.data.startswith(f'"HTTP/1.1 {status}'):
            return call
    return None


def traced_reply(log: Path, client_port: int, status: str, timeout_s: float = 60) -> tuple[list[Call], Call]:
    """(the calls so far, the engine's write of ``HTTP/1.1 <status>`` to the client on ``client_port``).
    The client can read the response before strace has logged the write (it logs a call when it returns),
    so the log is read again until the line is there."""
    deadline = time.monotonic() + timeout_s
    while True:
        trace = calls(log)
        reply = _reply(trace, client_port, status)
        if reply is not None:
            return trace, reply
        assert time.monotonic() < deadline, f"no HTTP/1.1 {status} written to the client on port {client_port}"
        time.sleep(0.05)


def durable_before(trace: list[Call], reply: Call, journal: str) -> tuple[list[Call], list[Call]]:
    """(journal writes, completed journal fsyncs) between the previous response and ``reply``;
    ``journal`` is the end of the file's path."""
    responses = [c for c in trace if c.fd.startswith("TCP:") and c.data.startswith('"HTTP/1.1 ') and c.line < reply.line]
    since = responses[-1].line if responses else -1
    window = [c for c in trace if since < c.line < reply.line and c.fd.endswith(journal)]
    writes = [c for c in window if c.name.startswith(("write", "pwrite")) and int(c.result) > 0]
    synced = [c for c in window if c.name in ("fsync", "fdatasync") and c.result == "0" and c.done < reply.line]
    return writes, synced


def request(base: str, method: str, path: str, body: dict) -> tuple[int, int, dict]:
    """(the client's own port, status, JSON body): one request on a connection whose port we know."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.connect()
        client_port = conn.sock.getsockname()[1]
        conn.request(method, path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return client_port, resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """An engine (FAISS indexes, SQLite sessions, the test LLM) under strace; yields (base URL, log)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace not found: install Debian's strace (make install runs hack/install-system.sh)", pytrace=False)
    work = tmp_path_factory.mktemp("fsync")
    log = work / "strace.log"
    wrap = [strace, "-f", "-qq", "--seccomp-bpf", "-yy", "-s", "256", "-e", "signal=none", "-e", f"trace={CALLS}",
            "-o", str(log)]
    with engine_process(work, wrap=wrap) as engine:
        yield engine.base_url, log


def test_faiss_journal_is_fsynced_before_the_200(traced):
    base, log = traced
    marker = "fsync-probe-faiss-7f3a"
    client, status, body = request(base, "POST", "/index", {"index_name": "durable", "documents": [
        {"doc_id": marker, "text": f"{marker}: this write must reach the disk before it is acknowledged."}]})
    assert status == 200 and body[0]["doc_id"] == marker, body
    trace, reply = traced_reply(log, client, "200")
    writes, synced = durable_before(trace, reply, "/journal.log")
    assert any(marker in w.data for w in writes), "the record was not written to the journal before the 200"
    last_write = max(w.done for w in writes)
    assert any(s.line > last_write for s in synced), (
        f"no fsync of the journal completed between its write and the 200: {[(s.name, s.fd) for s in synced]}")


def test_sqlite_session_writes_are_fsynced_before_the_response(traced):
    base, log = traced
    client, status, body = request(base, "POST", "/v1/sessions", {"title": "fsync-probe-session"})
    assert status == 201, body
    trace, reply = traced_reply(log, client, "201")
    writes, synced = durable_before(trace, reply, "/sessions.db-wal")
    assert writes, "the session was not written to the WAL before the 201"
    assert any(s.line > max(w.done for w in writes) for s in synced), "the WAL was not fsynced before the 201"

    client, status, body = request(base, "POST", f"/v1/sessions/{body['id']}/messages", {"content": "Hello?"})
    assert status == 200 and body["assistant_message"]["content"], body
    trace, reply = traced_reply(log, client, "200")
    writes, synced = durable_before(trace, reply, "/sessions.db-wal")
    assert writes, "the messages were not written to the WAL before the 200"
    assert any(s.line > max(w.done for w in writes) for s in synced), "the WAL was not fsynced before the 200"


def test_upload_bytes_are_fsynced_before_the_202(traced):
    """The job's input survives a power cut: its bytes (and the folder entry naming them) are on disk
    before the upload is accepted, so the job queued at the next start can read them."""
    base, log = traced
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.connect()
        client = conn.sock.getsockname()[1]
        boundary = "fsyncprobeboundary"
        payload = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"probe.txt\"\r\n"
                   f"Content-Type: text/plain\r\n\r\nThe probe upload must be on disk before the 202.\r\n"
                   f"--{boundary}--\r\n").encode()
        conn.request("POST", "/v1/files", body=payload,
                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        resp = conn.getresponse()
        status, body = resp.status, json.loads(resp.read())
    finally:
        conn.close()
    assert status == 202, body
    trace, reply = traced_reply(log, client, "202")
    writes, synced = durable_before(trace, reply, f"/uploads/{body['file_id']}")
    assert writes, "the upload's bytes were not written before the 202"
    assert any(s.line > max(w.done for w in writes) for s in synced), "the upload's bytes were not fsynced before the 202"
    _, folder = durable_before(trace, reply, "/uploads")
    assert any(s.line > max(w.done for w in writes) for s in folder), "the uploads folder was not fsynced before the 202"
