"""What the upgrade tests write through one engine and read back through another (issue 48).

``seed(base)`` writes, over the HTTP API, one of everything the engine persists: an index with documents, an index
re-indexed into a second version (the first kept, retired), a session with messages and an uploaded file, a vector
store with a file, and writes after the re-index that only the journal holds until the next snapshot. ``view(base,
seeded)`` reads all of it back as plain JSON (documents, versions, sessions, messages, files, vector stores, and the
answers of retrieval and vector store search), so the view of the engine that wrote it and the view of the engine
that upgraded it compare with ``==``. ``refused_start(data_dir)`` runs ``ragengine serve`` where it must refuse to start
and checks that it left the data folder exactly as it was (``folder_digest``).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.engine_process import REPO, engine_env
from tests.support.versions import wait_job

KB = [{"doc_id": f"kb-{i}", "text": f"Lighthouse log {i}: the keeper records the {w} at {i} o'clock, then trims the lamp.",
       "metadata": {"i": i, "kind": w}} for i, w in enumerate(["fog", "storm", "tide", "gale", "calm", "swell"])]
LATE = [{"doc_id": "kb-late", "text": "Written after the re-index: the harbour master moved the buoys south.",
         "metadata": {"late": True}}]
NOTES = [{"doc_id": f"note-{i}", "text": f"Field note {i} about {t}.", "metadata": {"t": t}}
         for i, t in enumerate(["herons", "otters", "kelp"])]
QUERIES = {"kb": ["when is the storm logged", "buoys moved south"], "notes": ["otters"]}
SESSION_FILE = ("tides.md", b"# Tide tables\n\nSpring tides come twice a month, at new and full moon.")
STORE_FILE = ("pumps.md", b"# Pump manual\n\nThe bilge pump primes itself within ten seconds.")
# Fields that move by themselves (a search marks a vector store active) or differ by design between engines.
MOVING = {"last_active_at", "expires_at"}


def _ok(resp: httpx.Response, *codes: int) -> dict:
    assert resp.status_code in (codes or (200,)), (resp.request.url, resp.status_code, resp.text[:500])
    return resp.json()


def _wait_file(client: httpx.Client, path: str, timeout_s: float = 120.0) -> dict:
    """GET ``path`` (a file object) until its ingestion has ended; it must have completed."""
    deadline = time.monotonic() + timeout_s
    while True:
        body = _ok(client.get(path))
        if body["status"] not in ("uploaded", "in_progress", "processing"):
            assert body["status"] in ("processed", "completed"), body
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


def seed(base: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """Write one of everything; returns the ids the view reads. ``headers``: an engine that requires its key."""
    with httpx.Client(base_url=base, timeout=300, headers=headers) as client:
        _ok(client.post("/index", json={"index_name": "kb", "documents": KB}))
        _ok(client.post("/indexes/kb/reindex", json={"chunking": {"chunk_size": 48, "chunk_overlap": 8}}), 202)
        assert wait_job(base, "kb", headers=headers)["job"]["state"] == "succeeded"
        _ok(client.post("/index", json={"index_name": "kb", "documents": LATE}))  # into version 2's journal
        _ok(client.post("/index", json={"index_name": "notes", "documents": NOTES}))
        session = _ok(client.post("/v1/sessions", json={"title": "harbour", "index_name": "kb"}), 201)["id"]
        _ok(client.post(f"/v1/sessions/{session}/messages", json={"content": "When is the storm logged?"}))
        _ok(client.post(f"/v1/sessions/{session}/messages", json={"content": "And the fog?"}))
        upload = _ok(client.post("/v1/files", files={"file": (*SESSION_FILE, "text/markdown")},
                                 data={"session_id": session}), 202)["id"]
        _wait_file(client, f"/v1/files/{upload}")
        store = _ok(client.post("/v1/vector_stores", json={"name": "manuals"}))["id"]
        store_file = _ok(client.post("/v1/files", files={"file": (*STORE_FILE, "text/markdown")},
                                     data={"purpose": "assistants"}), 202)["id"]
        _ok(client.post(f"/v1/vector_stores/{store}/files", json={"file_id": store_file, "attributes": {"deck": "lower"}}))
        _wait_file(client, f"/v1/vector_stores/{store}/files/{store_file}")
    return {"session": session, "files": [upload, store_file], "store": store}


def _still(value: Any, skip: frozenset[str]) -> Any:
    """``value`` without the fields that move by themselves and without what concerns the files in ``skip``."""
    if isinstance(value, dict):
        return {k: _still(v, skip) for k, v in value.items() if k not in MOVING}
    if isinstance(value, list):
        return [_still(v, skip) for v in value if not (isinstance(v, dict) and _concerns(v, skip))]
    if isinstance(value, float):
        return round(value, 4)
    return value


def _concerns(item: dict, files: frozenset[str]) -> bool:
    return bool({item.get("id"), item.get("file_id"), (item.get("metadata") or {}).get("file_id")} & files)


def view(base: str, seeded: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything ``seed`` wrote, as this engine serves it; ``skip``: files left out (one written after the view
    of the engine that wrote them was taken)."""
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base, timeout=120) as client:
        names = _ok(client.get("/indexes"))
        out["indexes"] = names
        for name in names:
            out[f"documents {name}"] = _ok(client.get(f"/indexes/{name}/documents",
                                                      params={"limit": 100, "max_text_length": 100_000}))["documents"]
            out[f"versions {name}"] = _ok(client.get(f"/indexes/{name}/versions"))
        for name, queries in QUERIES.items():
            for q in queries:
                hits = _ok(client.post("/retrieve", json={"index_name": name, "query": q, "max_node_count": 4}))
                out[f"retrieve {name} {q}"] = [(h["doc_id"], h["score"], h["text"]) for h in hits["results"]]
        session = seeded["session"]
        out["sessions"] = _ok(client.get("/v1/sessions"))
        out["session"] = _ok(client.get(f"/v1/sessions/{session}"))
        out["messages"] = _ok(client.get(f"/v1/sessions/{session}/messages"))
        out["files"] = [_ok(client.get(f"/v1/files/{f}")) for f in seeded["files"]]
        store = seeded["store"]
        out["store"] = _ok(client.get(f"/v1/vector_stores/{store}"))
        out["store files"] = _ok(client.get(f"/v1/vector_stores/{store}/files"))
        out["store search"] = _ok(client.post(f"/v1/vector_stores/{store}/search", json={"query": "bilge pump"}))
    return _still(out, frozenset(skip))


def as_served_before(after: Any, before: Any) -> Any:
    """``after`` with only the fields ``before`` had: a newer release may add fields to its answers (the engine's
    HTTP API promises additions only, docs/upgrades.md), never drop or change one."""
    if isinstance(before, dict) and isinstance(after, dict):
        return {k: as_served_before(after[k], v) if k in after else "<missing>" for k, v in before.items()}
    if isinstance(before, list | tuple) and isinstance(after, list | tuple) and len(before) == len(after):
        return type(after)(as_served_before(a, b) for a, b in zip(after, before, strict=True))
    if isinstance(before, float) and isinstance(after, float) and abs(after - before) <= SCORE_TOLERANCE:
        return before
    return after


# A retrieval score may move in its fourth decimal: since the fp16 OpenVINO form of the model (issue 45) the
# query's embedding is computed from 16-bit weights where the previous release read the ONNX file's 32-bit ones
# (cosine 0.99997 between the two; the stored vectors are unchanged). Seen: 0.56944 -> 0.56998.
SCORE_TOLERANCE = 2e-3


def folder_digest(root: Path) -> dict[str, tuple]:
    """Every file and folder under ``root``: its kind, size, bytes and modification time (a file made and removed
    again changes its folder's)."""
    out = {}
    for path in [*sorted(root.rglob("*")), root]:
        st = path.lstat()
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, content)
    return out


def refused_start(data_dir: Path, settings: dict[str, str] | None = None) -> str:
    """Start this checkout's ``ragengine serve`` on ``data_dir``: it must stop at once, refusing, before it binds its
    port or loads a model, and leave the folder exactly as it was. Returns what it printed."""
    before = folder_digest(data_dir)
    cmd = [sys.executable, "-m", "ragengine.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir)]
    for key, value in (settings or {}).items():
        cmd += ["--set", f"{key}={value}"]
    result = subprocess.run(cmd, cwd=REPO, env=engine_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "refusing to start: " in result.stderr and "listening on" not in result.stderr, result.stderr[-3000:]
    assert folder_digest(data_dir) == before
    return result.stderr
