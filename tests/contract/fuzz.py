"""Schemathesis against a real engine process: no 5xx, responses as declared in ``/openapi.json``.

``seed_engine`` creates an index, a session, a thread and a file to act on;
``run_fuzz(base_url, known_ids, seed=..., max_examples=...)`` runs the ``st run`` command against a running
engine and returns its exit status, output and the requests it made, counted by status (from its
HAR report). The contract test runs it with a fixed seed and few examples per operation;
``python -m tests.contract.fuzz`` (``make fuzz``) starts an engine of its own, seeds it and runs
longer with a random seed, printed first so a failure can be repeated with ``--seed``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

SEEDED_INDEX = "seeded"
SEEDED_STORE = "seeded-store"
SEEDED_DOCS = [
    {"doc_id": "doc-vectors", "text": "FAISS searches unit vectors by inner product.", "metadata": {"topic": "vectors"}},
    {"doc_id": "doc-journal", "text": "The journal is fsynced before a write is acknowledged.",
     "metadata": {"topic": "durability"}},
    {"doc_id": "doc-bm25", "text": "BM25 ranks documents by term frequency.", "metadata": {"topic": "keywords"}},
]
# What the issue asks of every response; the others (e.g. negative_data_rejection) judge the API's design.
CHECKS = ("not_a_server_error", "response_schema_conformance", "status_code_conformance")


@dataclass
class FuzzResult:
    returncode: int
    output: str
    seconds: float
    responses: list[tuple[str, str, int]] = field(default_factory=list)  # (method, URL path, status) per request

    @property
    def statuses(self) -> collections.Counter:
        return collections.Counter(status for _method, _path, status in self.responses)

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    def summary(self) -> str:
        by_status = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        return f"{self.requests} requests in {self.seconds:.0f} s ({by_status})"


def seed_engine(base_url: str) -> dict[str, list[str]]:
    """Create what the routes act on: an index with documents, a session with a message, a thread and a file;
    a vector store with a file and a batch, and a stored response.

    Returns the ids by parameter name; the fuzzer uses one of them part of the time and a generated
    value otherwise, so it reaches the routes' logic past "404 not found" as well as the 404s.
    """
    with httpx.Client(base_url=base_url, timeout=120) as client:
        client.post("/index", json={"index_name": SEEDED_INDEX, "documents": SEEDED_DOCS}).raise_for_status()
        session = client.post("/v1/sessions", json={"title": "seeded", "index_name": SEEDED_INDEX}).json()["id"]
        posted = client.post(f"/v1/sessions/{session}/messages", json={"content": "What does FAISS search?"})
        posted.raise_for_status()
        message = posted.json()["user_message"]["id"]
        thread = client.post(f"/v1/sessions/{session}/threads", json={"parent_message_id": message}).json()["id"]
        upload = client.post("/v1/files", files={"file": ("notes.md", b"# Notes\n\nBM25 and FAISS.", "text/markdown")},
                             data={"session_id": session})
        upload.raise_for_status()
        # OpenAI's surface: a vector store (an index of its own, so deleting it spares the seeded index) with a
        # file in it, a file batch and a stored response
        store = client.post("/v1/vector_stores", json={"name": "seeded", "index_name": SEEDED_STORE})
        store.raise_for_status()
        vs_file = client.post("/v1/files", files={"file": ("faiss.md", b"FAISS searches unit vectors.", "text/markdown")},
                              data={"purpose": "assistants"})
        vs_file.raise_for_status()
        attached = client.post(f"/v1/vector_stores/{SEEDED_STORE}/files",
                               json={"file_id": vs_file.json()["id"], "attributes": {"topic": "vectors"}})
        attached.raise_for_status()
        batch = client.post(f"/v1/vector_stores/{SEEDED_STORE}/file_batches", json={"file_ids": [upload.json()["id"]]})
        batch.raise_for_status()
        response = client.post("/v1/responses", json={"input": "What does FAISS search?", "tools": [
            {"type": "file_search", "vector_store_ids": [SEEDED_STORE]}]})
        response.raise_for_status()
    return {"index_name": [SEEDED_INDEX], "doc_id": [d["doc_id"] for d in SEEDED_DOCS], "session_id": [session],
            "message_id": [message], "thread_id": [thread, "main"], "file_id": [upload.json()["id"], vs_file.json()["id"]],
            "vector_store_id": [SEEDED_STORE], "batch_id": [batch.json()["id"]], "response_id": [response.json()["id"]]}


def write_config(path: Path, known: dict[str, list[str]]) -> None:
    """A ``schemathesis.toml`` binding each parameter that names a seeded thing to its ids, 70% of the time."""
    bindings = {"path.index_name": "index_name", "body.index_name": "index_name", "body.doc_ids[*]": "doc_id",
                "body.documents[*].doc_id": "doc_id", "path.session_id": "session_id", "path.thread_id": "thread_id",
                "query.thread_id": "thread_id", "body.thread_id": "thread_id", "path.file_id": "file_id",
                "body.file_ids[*]": "file_id", "body.parent_message_id": "message_id",
                "path.vector_store_id": "vector_store_id", "body.file_id": "file_id", "path.batch_id": "batch_id",
                "path.response_id": "response_id", "body.previous_response_id": "response_id"}
    lines = ["[cache]", "enabled = false", "", "[dictionaries]"]  # no state left in the checkout
    lines += [f"{name} = {{ values = {json.dumps(values)} }}" for name, values in known.items()]
    lines += ["", "[parameters]"]
    lines += [f'"{key}" = {{ dictionary = "{name}", probability = 0.7 }}' for key, name in bindings.items()]
    path.write_text("\n".join(lines) + "\n")


def _responses(har: Path) -> list[tuple[str, str, int]]:
    if not har.exists():
        return []
    entries = json.loads(har.read_text())["log"]["entries"]
    return [(e["request"]["method"], urlsplit(e["request"]["url"]).path, e["response"]["status"]) for e in entries]


def run_fuzz(base_url: str, known: dict[str, list[str]], *, seed: int, max_examples: int,
             phases: str = "examples,coverage,fuzzing", max_time_s: int | None = None, workers: int = 1) -> FuzzResult:
    """Run Schemathesis once against ``base_url`` (which serves ``/openapi.json``)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        har, config = Path(tmp) / "requests.har", Path(tmp) / "schemathesis.toml"
        write_config(config, known)
        cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color", "run",
               f"{base_url}/openapi.json", "--checks", ",".join(CHECKS), "--seed", str(seed),
               "--max-examples", str(max_examples), "--phases", phases, "--workers", str(workers),
               "--request-timeout", "60", "--generation-database", "none", "--suppress-health-check", "all",
               "--report", "har", "--report-har-path", str(har), "--output-truncate", "true"]
        if max_time_s:
            cmd += ["--max-time", str(max_time_s)]
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false"})
        seconds = time.monotonic() - started
        return FuzzResult(proc.returncode, proc.stdout + proc.stderr, seconds, _responses(har))


def main() -> int:
    parser = argparse.ArgumentParser(description="Fuzz a real engine with Schemathesis (a random seed unless given).")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-examples", type=int, default=100, help="Test cases per operation and phase.")
    parser.add_argument("--phases", default="examples,coverage,fuzzing,stateful")
    parser.add_argument("--max-time", type=int, default=None, help="Seconds for the whole run.")
    parser.add_argument("--url", default=None, help="A running engine (it gets seeded); default: start one.")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"[fuzz] seed {seed} (repeat with: make fuzz FUZZ_ARGS='--seed {seed}')", flush=True)

    def fuzz(base_url: str) -> FuzzResult:
        return run_fuzz(base_url, seed_engine(base_url), seed=seed, max_examples=args.max_examples,
                        phases=args.phases, max_time_s=args.max_time)

    if args.url:
        result = fuzz(args.url)
    else:
        from tests.support.engine_process import engine_process

        with tempfile.TemporaryDirectory(prefix="fuzz-engine-") as work, engine_process(Path(work)) as engine:
            result = fuzz(engine.base_url)
    print(result.output)
    print(f"[fuzz] seed {seed}: {result.summary()}; exit status {result.returncode}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
