"""Schemathesis against a real engine process with access control on: no 5xx, responses as declared in
``/openapi.json``, and no principal ever shown another's data.

The engine runs with an admin key (``RAGENGINE_API_KEY``) and an access file of keys of each role, two of
them index-scoped (``PRINCIPALS``). ``seed_engine`` gives each principal private data holding a marker of its
own (a random string nothing else contains): an index only it sees, a document in a shared index with an
ACL naming it, a session with a message and a thread, an upload, a stored response, a vector store, an
evaluation run. It returns the ids (for the parameter dictionaries: every principal's ids, so the fuzzer tries each one's as
another) and what the checks need (``FuzzState``).

``run_fuzz`` runs ``st run`` on every operation of the engine's own ``/openapi.json`` (new routes are
picked up with no change here: the evaluations, the console's ``/whoami`` and its open files) through the
phases examples, coverage, fuzzing and stateful (the OpenAPI links the engine publishes: create, then read,
update and delete what was created); each request goes with the key of a principal drawn at random
(``fuzz_hooks.py``: a seeded draw, some requests with no key or a wrong one). Checks: Schemathesis's
``not_a_server_error``, ``response_schema_conformance`` and ``status_code_conformance``, and
``no_foreign_data`` (``fuzz_hooks.py``): a non-admin's response never holds another principal's marker, and
never answers 2xx on another principal's session, upload, stored response or evaluation run (seeded, or
created during the run). ``/mcp`` is not in ``/openapi.json`` (its messages are JSON-RPC, not operations
Schemathesis can generate): tests/engine/test_mcp.py drives it with the official MCP client, per principal
(index-scoped keys, document ACLs, sessions, no or a wrong key, bad input, rate limits). The contract test
runs it at a size that fits the suite (a fixed seed); ``python -m tests.contract.fuzz`` (``make fuzz``)
starts an engine of its own, seeds it and runs rounds (seed, seed + 1, ...) until at least 20,000 requests
were made, with a random seed printed first so a failure can be repeated with ``--seed``.
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
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parents[2]  # the hooks module is imported from here
ADMIN_KEY = "fuzz-admin-key-0123456789abcdef"
# name -> (key, role, index patterns); "admin" is RAGENGINE_API_KEY (every index, every session)
PRINCIPALS = {
    "reader": ("fuzz-reader-key-0123456789abcdef", "read", ["shared", "team-r-*"]),
    "writer": ("fuzz-writer-key-0123456789abcdef", "write", ["shared", "team-w-*"]),
    "scoped": ("fuzz-scoped-key-0123456789abcdef", "read", ["team-s-*"]),
}
TEAM = {"reader": "team-r-docs", "writer": "team-w-docs", "scoped": "team-s-docs", "admin": "admin-docs"}
# What the issue asks of every response, plus the isolation check; the others (e.g. negative_data_rejection)
# judge the API's design.
CHECKS = ("not_a_server_error", "response_schema_conformance", "status_code_conformance", "no_foreign_data")


def access_file(path: Path) -> Path:
    keys = [{"name": name, "key": key, "role": role, "indexes": indexes}
            for name, (key, role, indexes) in PRINCIPALS.items()]
    path.write_text(json.dumps({"keys": keys}))
    return path


def engine_settings(work: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(``--set`` settings, environment) of an engine with access control on, as ``engine_process`` takes them."""
    return {"access_file": str(access_file(work / "access.yaml"))}, {"RAGENGINE_API_KEY": ADMIN_KEY}


def key_of(name: str) -> str:
    return ADMIN_KEY if name == "admin" else PRINCIPALS[name][0]


@dataclass
class FuzzState:
    """What the hooks and checks read (written to a file their process loads)."""

    keys: dict[str, str]  # key -> principal name
    markers: dict[str, str]  # principal -> its marker
    owned: dict[str, str]  # id of a session, upload, stored response or evaluation run -> its principal
    protected: list[str] = field(default_factory=list)  # seeded indexes and stores: an admin does not delete them
    admins: list[str] = field(default_factory=lambda: ["admin"])
    seed: int = 0

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.__dict__))
        return path


@dataclass
class FuzzResult:
    returncode: int
    output: str
    seconds: float
    responses: list[tuple[str, str, int, str]] = field(default_factory=list)  # (method, path, status, principal)

    @property
    def statuses(self) -> collections.Counter:
        return collections.Counter(status for _m, _p, status, _w in self.responses)

    @property
    def by_principal(self) -> collections.Counter:
        return collections.Counter(who for _m, _p, _s, who in self.responses)

    @property
    def requests(self) -> int:
        return len(self.responses)

    @property
    def server_errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if s >= 500 and s != 503)

    def summary(self) -> str:
        by_status = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        who = ", ".join(f"{w}: {n}" for w, n in sorted(self.by_principal.items()))
        return f"{self.requests} requests in {self.seconds:.0f} s (by status {by_status}; by principal {who})"


def _ok(resp: httpx.Response) -> httpx.Response:
    if resp.status_code >= 300:
        raise RuntimeError(f"seeding failed: {resp.request.method} {resp.request.url.path}: {resp.status_code} {resp.text}")
    return resp


def seed_engine(base_url: str) -> tuple[dict[str, list[str]], FuzzState]:
    """Each principal's private data, with its marker (see the module's docstring). Returns the ids by
    parameter name and the checks' state."""
    markers = {name: f"mk{uuid.uuid4().hex[:16]}" for name in [*PRINCIPALS, "admin"]}
    owned: dict[str, str] = {}
    ids: dict[str, list[str]] = collections.defaultdict(list)
    admin = httpx.Client(base_url=base_url, timeout=120, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with admin:
        shared = [{"doc_id": "shared-public", "text": "The shared handbook: FAISS searches unit vectors.",
                   "metadata": {"topic": "vectors"}}]
        shared += [{"doc_id": f"shared-{name}", "text": f"Private note of {name}: {markers[name]}.",
                    "metadata": {"acl": [f"user:{name}"]}} for name in ("reader", "writer")]
        _ok(admin.post("/index", json={"index_name": "shared", "documents": shared}))
        for name, index in TEAM.items():
            _ok(admin.post("/index", json={"index_name": index, "documents": [
                {"doc_id": f"{name}-doc", "text": f"The {name} team's runbook holds {markers[name]}.",
                 "metadata": {"team": name}},
                {"doc_id": f"{name}-bm25", "text": "BM25 ranks documents by term frequency."}]}))
        ids["index_name"] += ["shared", *TEAM.values()]
        ids["doc_id"] += ["shared-public", "shared-reader", *(f"{n}-doc" for n in TEAM)]
    for name in [*PRINCIPALS, "admin"]:
        with httpx.Client(base_url=base_url, timeout=120, headers={"Authorization": f"Bearer {key_of(name)}"}) as c:
            marker = markers[name]
            session = _ok(c.post("/v1/sessions", json={"title": f"{name} {marker}", "index_name": TEAM[name]})).json()["id"]
            posted = _ok(c.post(f"/v1/sessions/{session}/messages", json={"content": f"What is {marker}?"})).json()
            message = posted["user_message"]["id"]
            thread = _ok(c.post(f"/v1/sessions/{session}/threads", json={"parent_message_id": message})).json()["id"]
            upload = _ok(c.post("/v1/files", data={"session_id": session, "purpose": "assistants"},
                                files={"file": (f"{name}.md", f"# {name}\n\n{marker} and FAISS.".encode(),
                                                "text/markdown")})).json()["id"]
            response = _ok(c.post("/v1/responses", json={"input": f"Remember {marker}."})).json()["id"]
            owned.update({session: name, upload: name, response: name})
            ids["session_id"].append(session)
            ids["message_id"].append(message)
            ids["thread_id"] += [thread]
            ids["file_id"].append(upload)
            ids["response_id"].append(response)
            if name in ("writer", "admin"):  # a vector store of its own, with its upload in it and a batch
                store = "team-w-store" if name == "writer" else "admin-store"
                _ok(c.post("/v1/vector_stores", json={"name": f"{name} store", "index_name": store}))
                _ok(c.post(f"/v1/vector_stores/{store}/files", json={"file_id": upload, "attributes": {"who": name}}))
                batch = _ok(c.post(f"/v1/vector_stores/{store}/file_batches", json={"file_ids": [upload]})).json()["id"]
                ids["vector_store_id"].append(store)
                ids["batch_id"].append(batch)
                # an evaluation run (write role) on the index both see, so only ownership keeps each from the
                # other's; its question holds the marker (the admin's results, the others' ACL'd notes too)
                run = _ok(c.post("/indexes/shared/evaluations", json={"questions": [
                    {"id": "q1", "question": f"Whose note holds {marker}?", "relevant_doc_ids": ["shared-public"]}],
                    "top_k": 3})).json()["id"]
                owned[run] = name
                ids["evaluation_id"].append(run)
    ids["thread_id"].append("main")
    keys = {key_of(name): name for name in [*PRINCIPALS, "admin"]}
    return dict(ids), FuzzState(keys=keys, markers=markers, owned=owned,
                                protected=[*ids["index_name"], *ids["vector_store_id"]])


def write_config(path: Path, known: dict[str, list[str]], stateful_examples: int = 50, max_steps: int = 20) -> None:
    """A ``schemathesis.toml`` binding each parameter that names a seeded thing to its ids, 70% of the time, and
    sizing the stateful phase: ``stateful_examples`` sequences of up to ``max_steps`` linked calls."""
    bindings = {"path.index_name": "index_name", "body.index_name": "index_name", "body.doc_ids[*]": "doc_id",
                "body.documents[*].doc_id": "doc_id", "path.session_id": "session_id", "path.thread_id": "thread_id",
                "query.thread_id": "thread_id", "body.thread_id": "thread_id", "path.file_id": "file_id",
                "body.file_ids[*]": "file_id", "body.parent_message_id": "message_id",
                "path.vector_store_id": "vector_store_id", "body.file_id": "file_id", "path.batch_id": "batch_id",
                "path.response_id": "response_id", "body.previous_response_id": "response_id",
                "path.evaluation_id": "evaluation_id", "path.other_id": "evaluation_id",
                "body.evaluation_id": "evaluation_id"}
    # no state left in the checkout; the keys in the HAR report (test keys: the run is counted by principal)
    lines = ["[cache]", "enabled = false", "", "[output.sanitization]", "enabled = false", "", "[dictionaries]"]
    lines += [f"{name} = {{ values = {json.dumps(values)} }}" for name, values in known.items()]
    lines += ["", "[phases.stateful]", f"max-steps = {max_steps}", "", "[phases.stateful.generation]",
              f"max-examples = {stateful_examples}"]
    lines += ["", "[parameters]"]
    lines += [f'"{key}" = {{ dictionary = "{name}", probability = 0.7 }}' for key, name in bindings.items()]
    path.write_text("\n".join(lines) + "\n")


def _responses(har: Path, keys: dict[str, str]) -> list[tuple[str, str, int, str]]:
    if not har.exists():
        return []
    out = []
    for e in json.loads(har.read_text())["log"]["entries"]:
        auth = next((h["value"] for h in e["request"]["headers"] if h["name"].lower() == "authorization"), "")
        who = keys.get(auth.removeprefix("Bearer "), "none" if not auth else "wrong-key")
        out.append((e["request"]["method"], urlsplit(e["request"]["url"]).path, e["response"]["status"], who))
    return out


def run_fuzz(base_url: str, known: dict[str, list[str]], state: FuzzState, *, seed: int, max_examples: int,
             phases: str = "examples,coverage,fuzzing,stateful", max_time_s: int | None = None,
             workers: int = 1, stateful_examples: int | None = None) -> FuzzResult:
    """Run Schemathesis once against ``base_url``, on the operations of its ``/openapi.json``."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        har, config, schema = Path(tmp) / "requests.har", Path(tmp) / "schemathesis.toml", Path(tmp) / "openapi.json"
        write_config(config, known, stateful_examples or 5 * max_examples)
        spec = httpx.get(f"{base_url}/openapi.json", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60)
        schema.write_text(_ok(spec).text)
        state.seed = seed
        state_file = state.write(Path(tmp) / "state.json")
        cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color", "run",
               str(schema), "--url", base_url, "--checks", ",".join(CHECKS), "--seed", str(seed),
               "--max-examples", str(max_examples), "--phases", phases, "--workers", str(workers),
               "--request-timeout", "60", "--generation-database", "none", "--suppress-health-check", "all",
               "--report", "har", "--report-har-path", str(har), "--output-truncate", "true"]
        if max_time_s:
            cmd += ["--max-time", str(max_time_s)]
        started = time.monotonic()
        env = {**os.environ, "SCHEMATHESIS_TELEMETRY": "false", "SCHEMATHESIS_HOOKS": "tests.contract.fuzz_hooks",
               "RAGENGINE_FUZZ_STATE": str(state_file)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        seconds = time.monotonic() - started
        return FuzzResult(proc.returncode, proc.stdout + proc.stderr, seconds, _responses(har, state.keys))


def main() -> int:
    parser = argparse.ArgumentParser(description="Fuzz a real engine with Schemathesis, access control on "
                                                 "(a random seed unless given).")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-examples", type=int, default=100, help="Test cases per operation and phase.")
    parser.add_argument("--phases", default="examples,coverage,fuzzing,stateful")
    parser.add_argument("--max-time", type=int, default=None, help="Seconds for each round.")
    parser.add_argument("--min-requests", type=int, default=20_000,
                        help="Rounds (seed, seed + 1, ...) run on one engine until this many requests were made.")
    parser.add_argument("--max-rounds", type=int, default=10)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"[fuzz] seed {seed} (repeat with: make fuzz FUZZ_ARGS='--seed {seed}')", flush=True)
    from tests.support.engine_process import engine_process

    results: list[FuzzResult] = []
    with tempfile.TemporaryDirectory(prefix="fuzz-engine-") as work:
        settings, env = engine_settings(Path(work))
        with engine_process(Path(work), settings=settings, env=env) as engine:
            known, state = seed_engine(engine.base_url)
            while sum(r.requests for r in results) < args.min_requests and len(results) < args.max_rounds:
                result = run_fuzz(engine.base_url, known, state, seed=seed + len(results),
                                  max_examples=args.max_examples, phases=args.phases, max_time_s=args.max_time)
                results.append(result)
                print(result.output if result.returncode else result.output[-3000:])
                print(f"[fuzz] round {len(results)} (seed {seed + len(results) - 1}): {result.summary()}; "
                      f"5xx (but 503): {result.server_errors}; exit status {result.returncode}", flush=True)
                if result.returncode:
                    break
    total = FuzzResult(max(r.returncode for r in results), "", sum(r.seconds for r in results),
                       [x for r in results for x in r.responses])
    print(f"[fuzz] seed {seed}, {len(results)} round(s): {total.summary()}; 5xx (but 503): {total.server_errors}; "
          f"exit status {total.returncode}")
    if total.returncode == 0 and total.requests < args.min_requests:
        print(f"[fuzz] only {total.requests} requests (at least {args.min_requests} asked): raise --max-rounds")
        return 1
    return total.returncode


if __name__ == "__main__":
    sys.exit(main())
