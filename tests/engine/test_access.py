"""Access control on every route: a matrix of principals × the route table, checked against a literal spec.

``EXPECTED`` below is this test's own statement of what each route needs (role, where its index comes
from, whether it creates the index), written out by hand; it is not read from ``access/routes.py``. The
test first checks that it names exactly the app's operations, so a route added without a rule (or with
one this spec does not know) fails here. Then every route is called as every principal (the ServiceAccount
column, which needs the local API server, is in test_access_serviceaccounts.py):

- no credentials and a wrong key: 401 (except the open probes and metrics);
- a reader of another team's indexes: 404 with the missing-index message on index routes (403 on routes
  that create the index), so existence is not revealed;
- a role below the route's: 403 naming the role needed;
- otherwise the request gets past access control (any status but 401/403 and the deny 404).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

import httpx
import jsonschema_rs
import pytest

from ragengine.access.routes import OPEN_PATHS
from tests.support.routes import operations

ADMIN_KEY = "admin-key-0123456789abcdef"  # RAGENGINE_API_KEY
STATUS_KEY = "operator-status-key-for-this-engine"  # status_key_sha256: the operator's
READ_A, WRITE_A, ADMIN_A, READ_B = ("read-a-0123456789abcdef", "write-a-0123456789abcdef",
                                    "admin-a-0123456789abcdef", "read-b-0123456789abcdef")
ACCESS = {"keys": [
    {"name": "reader-a", "key": READ_A, "indexes": ["team-a-*"], "role": "read"},
    {"name": "writer-a", "keySha256": hashlib.sha256(WRITE_A.encode()).hexdigest(), "indexes": ["team-a-*"],
     "role": "write"},
    {"name": "admin-a", "key": ADMIN_A, "indexes": ["team-a-*"], "role": "admin"},
    {"name": "reader-b", "key": READ_B, "indexes": ["team-b-*"], "role": "read"},
]}
INDEX = "team-a-docs"
OPEN_BY_DESIGN = {"/health", "/ready", "/metrics", "/ui", "/ui/", "/ui/assets/{name}"}
SPEC_ROUTES = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
NONE, READ, WRITE, ADMIN = None, 1, 2, 3
# (method, path) -> (role needed, index from: "path" | "body" | "chat" | "store" | "tools" | "-", creates the index)
EXPECTED: dict[tuple[str, str], tuple[int | None, str, bool]] = {
    ("get", "/health"): (NONE, "-", False),
    ("get", "/ready"): (NONE, "-", False),
    ("get", "/metrics"): (NONE, "-", False),
    ("get", "/ui"): (NONE, "-", False),
    ("get", "/ui/"): (NONE, "-", False),
    ("get", "/ui/assets/{name}"): (NONE, "-", False),
    ("get", "/whoami"): (READ, "-", False),
    ("post", "/index"): (WRITE, "body", True),
    ("post", "/index/files"): (WRITE, "form", True),
    ("get", "/indexes"): (READ, "-", False),
    ("get", "/indexes/{index_name}/documents"): (READ, "path", False),
    ("post", "/indexes/{index_name}/documents"): (WRITE, "path", False),
    ("post", "/indexes/{index_name}/documents/metadata"): (WRITE, "path", False),
    ("post", "/indexes/{index_name}/documents/delete"): (WRITE, "path", False),
    ("delete", "/indexes/{index_name}"): (ADMIN, "path", False),
    ("post", "/persist/{index_name}"): (ADMIN, "path", False),
    ("post", "/load/{index_name}"): (ADMIN, "path", True),
    ("post", "/retrieve"): (READ, "body", False),
    ("post", "/indexes/{index_name}/reindex"): (WRITE, "path", False),
    ("get", "/indexes/{index_name}/reindex"): (WRITE, "path", False),
    ("get", "/indexes/{index_name}/versions"): (WRITE, "path", False),
    ("post", "/indexes/{index_name}/versions/{version}/activate"): (ADMIN, "path", False),
    ("delete", "/indexes/{index_name}/versions/{version}"): (ADMIN, "path", False),
    ("get", "/indexes/{index_name}/export"): (ADMIN, "path", False),
    ("post", "/indexes/{index_name}/import"): (WRITE, "path", True),
    ("post", "/indexes/{index_name}/evaluations"): (WRITE, "path", False),
    ("get", "/indexes/{index_name}/evaluations"): (WRITE, "path", False),
    ("put", "/indexes/{index_name}/evaluations/golden-set"): (WRITE, "path", False),
    ("get", "/indexes/{index_name}/evaluations/golden-set"): (WRITE, "path", False),
    ("get", "/indexes/{index_name}/evaluations/{evaluation_id}"): (WRITE, "path", False),
    ("get", "/indexes/{index_name}/evaluations/{evaluation_id}/compare/{other_id}"): (WRITE, "path", False),
    ("post", "/v1/chat/completions"): (READ, "chat", False),
    ("get", "/v1/models"): (READ, "-", False),
    ("post", "/v1/chat/reformulate"): (READ, "-", False),
    ("post", "/v1/files"): (READ, "-", False),
    ("get", "/v1/files"): (READ, "-", False),
    ("get", "/v1/files/{file_id}"): (READ, "-", False),
    ("delete", "/v1/files/{file_id}"): (READ, "-", False),
    ("post", "/v1/sessions"): (READ, "body", False),
    ("get", "/v1/sessions"): (READ, "-", False),
    ("get", "/v1/sessions/{session_id}"): (READ, "-", False),
    ("delete", "/v1/sessions/{session_id}"): (READ, "-", False),
    ("get", "/v1/sessions/{session_id}/messages"): (READ, "-", False),
    ("post", "/v1/sessions/{session_id}/messages"): (READ, "-", False),
    ("get", "/v1/sessions/{session_id}/files"): (READ, "-", False),
    ("post", "/v1/sessions/{session_id}/files"): (READ, "-", False),
    ("delete", "/v1/sessions/{session_id}/files/{file_id}"): (READ, "-", False),
    ("post", "/v1/sessions/{session_id}/threads"): (READ, "-", False),
    ("get", "/v1/sessions/{session_id}/threads"): (READ, "-", False),
    ("get", "/v1/sessions/{session_id}/threads/{thread_id}"): (READ, "-", False),
    # a vector store is an index (its id is the index's name)
    ("get", "/v1/vector_stores"): (READ, "-", False),
    ("post", "/v1/vector_stores"): (WRITE, "body", True),
    ("get", "/v1/vector_stores/{vector_store_id}"): (READ, "store", False),
    ("post", "/v1/vector_stores/{vector_store_id}"): (WRITE, "store", False),
    ("delete", "/v1/vector_stores/{vector_store_id}"): (ADMIN, "store", False),
    ("post", "/v1/vector_stores/{vector_store_id}/search"): (READ, "store", False),
    ("get", "/v1/vector_stores/{vector_store_id}/files"): (READ, "store", False),
    ("post", "/v1/vector_stores/{vector_store_id}/files"): (WRITE, "store", False),
    ("get", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): (READ, "store", False),
    ("post", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): (WRITE, "store", False),
    ("delete", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): (WRITE, "store", False),
    ("get", "/v1/vector_stores/{vector_store_id}/files/{file_id}/content"): (READ, "store", False),
    ("post", "/v1/vector_stores/{vector_store_id}/file_batches"): (WRITE, "store", False),
    ("get", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}"): (READ, "store", False),
    ("post", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel"): (WRITE, "store", False),
    ("get", "/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files"): (READ, "store", False),
    # file_search reads every store its tools name; stored responses are their creator's
    ("post", "/v1/responses"): (READ, "tools", False),
    ("get", "/v1/responses/{response_id}"): (READ, "-", False),
    ("delete", "/v1/responses/{response_id}"): (READ, "-", False),
    ("get", "/v1/responses/{response_id}/input_items"): (READ, "-", False),
    # the MCP transport: each tool call and resource read is then checked on its own (tests/engine/test_mcp.py)
    ("post", "/mcp"): (READ, "-", False),
    ("get", "/mcp"): (READ, "-", False),
    ("delete", "/mcp"): (READ, "-", False),
}
NOT_IN_OPENAPI = {"/mcp"}  # JSON-RPC over streamable HTTP, not a REST resource (docs/mcp.md)
# principal -> (Authorization header, role, sees team-a indexes)
PRINCIPALS = {
    "none": (None, None, False),
    "wrong": ("Bearer not-a-key-0123456789", None, False),
    "bare key": (READ_A, None, False),  # no "Bearer " scheme
    "read, other index": (f"Bearer {READ_B}", READ, False),
    "read": (f"Bearer {READ_A}", READ, True),
    "write": (f"Bearer {WRITE_A}", WRITE, True),
    "admin on team-a": (f"Bearer {ADMIN_A}", ADMIN, True),
    "admin (RAGENGINE_API_KEY)": (f"Bearer {ADMIN_KEY}", ADMIN, True),
}


def _body(path: str, scope: str) -> dict:
    if scope == "tools":
        return {"model": "m", "input": "what is in the runbook?",
                "tools": [{"type": "file_search", "vector_store_ids": [INDEX]}]}
    if scope == "chat":
        return {"index_name": INDEX, "messages": [{"role": "user", "content": "what is in the docs?"}]}
    if path == "/index":
        return {"index_name": INDEX, "documents": [{"text": "Team A's runbook says restart the pump weekly."}]}
    if scope == "body":
        return {"index_name": INDEX, "query": "runbook"}
    return {}


def _call(base: str, method: str, path: str, scope: str, auth: str | None) -> httpx.Response:
    named = re.sub(r"\{(?!index_name|vector_store_id)[^}]+\}", "x", path)  # a store's id is its index's name
    url = base + re.sub(r"\{(index_name|vector_store_id)\}", INDEX, named)
    headers = {"Authorization": auth} if auth else {}
    body: dict = {"json": _body(path, scope)} if method in ("post", "put", "patch") else {}
    if scope == "form":  # multipart: the index is named by a form field
        body = {"data": {"index_name": INDEX}, "files": {"files": ("runbook.txt", b"Restart the pump weekly.")}}
    return httpx.request(method.upper(), url, headers=headers, timeout=60, **body)


def _missing(scope: str) -> str:
    """The 404 message of a missing index (or vector store: an index seen through the vector store API)."""
    if scope in ("store", "tools"):
        return f"No vector store found with id '{INDEX}'."
    return f"No such index: '{INDEX}' exists."


def _message(resp: httpx.Response) -> str:
    """The error message of an error response in either shape; "" for anything else."""
    try:
        body = resp.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    return error.get("message", "") if isinstance(error, dict) else str(body.get("detail", ""))


def _write_access(path: Path, rules: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rules))  # JSON is YAML
    tmp.replace(path)  # atomic, like a Secret volume's symlink swap: a new inode


@pytest.fixture(scope="module")
def engine(embedder, tmp_path_factory):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import serve_engine

    work = tmp_path_factory.mktemp("access")
    access_file = work / "access.yaml"
    _write_access(access_file, ACCESS)
    app = create_app(EngineSettings(api_key=ADMIN_KEY, access_file=access_file, data_dir=work / "data",
                                    status_key_sha256=hashlib.sha256(STATUS_KEY.encode()).hexdigest()))
    with serve_engine(app, embedder) as base:
        spec = httpx.get(f"{base}/openapi.json", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
        yield base, app, spec, access_file


def _ensure_index(base: str) -> None:
    resp = httpx.post(f"{base}/index", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60,
                      json={"index_name": INDEX, "documents": [{"text": "Team A keeps its runbook here."}]})
    assert resp.status_code == 200, resp.text


def test_the_spec_names_exactly_the_apps_routes(engine):
    _base, app, spec, _ = engine
    assert operations(app) == set(EXPECTED), "a route without an entry in EXPECTED (or a stale entry)"
    documented = operations(app, documented=True)
    assert documented == {(m, p) for p, item in spec["paths"].items() for m in item}
    assert {p for _m, p in operations(app) - documented} == NOT_IN_OPENAPI


def test_open_paths_are_the_documented_ones():
    assert set(OPEN_PATHS) == OPEN_BY_DESIGN


def test_open_probes_show_details_only_to_an_admin_of_every_index(engine):
    """/health and /metrics name every index: a reader, a wrong key and an admin of some indexes only
    (who would learn the other teams' index names) get status only; the admin of ``*`` gets all."""
    base, *_ = engine
    _ensure_index(base)
    for auth in (None, f"Bearer {READ_A}", f"Bearer {ADMIN_A}", "Bearer wrong-key-0123456789"):
        headers = {"Authorization": auth} if auth else {}
        health = httpx.get(f"{base}/health", headers=headers)
        assert health.status_code == 200 and "indexes" not in health.json() and INDEX not in health.text, auth
        assert f'index="{INDEX}"' not in httpx.get(f"{base}/metrics", headers=headers).text, auth
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert INDEX in httpx.get(f"{base}/health", headers=admin).json()["indexes"]
    assert f'index="{INDEX}"' in httpx.get(f"{base}/metrics", headers=admin).text


def test_the_operators_status_key_shows_the_probes_in_full_and_opens_no_route(engine):
    """The operator reads index versions from /health with its key for this engine (status_key_sha256): it
    sees what an admin sees there, and every other route answers it 401, as to a wrong key."""
    base, _app, spec, _ = engine
    _ensure_index(base)
    key = {"Authorization": f"Bearer {STATUS_KEY}"}
    assert INDEX in httpx.get(f"{base}/health", headers=key).json()["indexes"]
    assert f'index="{INDEX}"' in httpx.get(f"{base}/metrics", headers=key).text
    check_every_route(base, spec, "status key", f"Bearer {STATUS_KEY}", None, False)


@pytest.mark.parametrize("principal", list(PRINCIPALS))
def test_every_route_as_every_principal(engine, principal):
    base, _app, spec, _ = engine
    check_every_route(base, spec, principal, *PRINCIPALS[principal])


def check_every_route(base: str, spec: dict, principal: str, auth: str | None, role: int | None, sees: bool) -> None:
    """One column of the matrix: every route of ``EXPECTED`` called with ``auth`` (the ServiceAccount column
    runs from tests/engine/test_access_serviceaccounts.py, with a real token from the local API server)."""
    for (method, path), (needed, scope, creates) in EXPECTED.items():
        _ensure_index(base)
        resp = _call(base, method, path, scope, auth)
        where = (principal, method, path, resp.status_code, resp.text[:200])
        assert resp.status_code < 500, where
        if needed is NONE:
            assert resp.status_code not in (401, 403), where
            continue
        if role is None:
            assert resp.status_code == 401, where
            if path in NOT_IN_OPENAPI:  # the MCP endpoint's challenge (RFC 6750's realm and error)
                assert resp.headers["www-authenticate"].startswith('Bearer realm="ragengine"'), where
                continue
            assert resp.headers["www-authenticate"] == "Bearer"
            schema = spec["paths"][path][method]["responses"]["401"]["content"]["application/json"]["schema"]
            assert jsonschema_rs.validator_for({**schema, "components": spec["components"]}).is_valid(resp.json())
            continue
        message = _message(resp)
        if scope != "-" and not sees:
            if creates:
                assert resp.status_code == 403, where
            else:
                assert resp.status_code == 404, where
                assert message == _missing(scope), where
            continue
        if role < needed:
            assert resp.status_code == 403, where
            assert {READ: "read", WRITE: "write", ADMIN: "admin"}[needed] in message, where
            continue
        assert resp.status_code not in (401, 403), where
        assert message != _missing(scope), where


def test_hidden_index_answers_exactly_like_a_missing_one(engine):
    base, *_ = engine
    _ensure_index(base)
    as_b = {"Authorization": f"Bearer {READ_B}"}
    hidden = httpx.post(f"{base}/retrieve", headers=as_b, json={"index_name": INDEX, "query": "runbook"})
    missing = httpx.post(f"{base}/retrieve", headers=as_b, json={"index_name": "team-b-none", "query": "runbook"})
    assert (hidden.status_code, hidden.json()["detail"].replace(INDEX, "?")) == \
        (missing.status_code, missing.json()["detail"].replace("team-b-none", "?"))


def test_rag_model_alias_is_checked_like_index_name(engine):
    base, *_ = engine
    _ensure_index(base)
    resp = httpx.post(f"{base}/v1/chat/completions", headers={"Authorization": f"Bearer {READ_B}"},
                      json={"model": f"rag:{INDEX}", "messages": [{"role": "user", "content": "runbook?"}]})
    assert resp.status_code == 404
    assert resp.json()["error"]["message"] == f"No such index: '{INDEX}' exists."


def test_lists_show_only_visible_indexes(engine):
    base, *_ = engine
    _ensure_index(base)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert httpx.post(f"{base}/index", headers=admin, timeout=60,
                      json={"index_name": "team-b-notes", "documents": [{"text": "Team B notes."}]}).status_code == 200
    as_a, as_b = {"Authorization": f"Bearer {READ_A}"}, {"Authorization": f"Bearer {READ_B}"}
    assert httpx.get(f"{base}/indexes", headers=as_a).json() == [INDEX]
    assert httpx.get(f"{base}/indexes", headers=as_b).json() == ["team-b-notes"]
    assert set(httpx.get(f"{base}/indexes", headers=admin).json()) >= {INDEX, "team-b-notes"}
    models = {m["id"] for m in httpx.get(f"{base}/v1/models", headers=as_b).json()["data"]}
    assert models == {"rag:team-b-notes"}


def test_vector_stores_are_visible_only_to_principals_allowed_their_index(engine):
    base, *_ = engine
    _ensure_index(base)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert httpx.post(f"{base}/index", headers=admin, timeout=60,
                      json={"index_name": "team-b-notes", "documents": [{"text": "Team B notes."}]}).status_code == 200
    as_a, as_b = {"Authorization": f"Bearer {READ_A}"}, {"Authorization": f"Bearer {READ_B}"}
    ids_a = {s["id"] for s in httpx.get(f"{base}/v1/vector_stores", headers=as_a).json()["data"]}
    ids_b = {s["id"] for s in httpx.get(f"{base}/v1/vector_stores", headers=as_b).json()["data"]}
    assert INDEX in ids_a and all(i.startswith("team-a-") for i in ids_a)
    assert ids_b == {"team-b-notes"}
    # a hidden store answers exactly like a missing one, on the store routes and in a response's tools
    hidden = httpx.get(f"{base}/v1/vector_stores/{INDEX}", headers=as_b)
    missing = httpx.get(f"{base}/v1/vector_stores/team-b-none", headers=as_b)
    assert (hidden.status_code, hidden.json()["error"]["message"].replace(INDEX, "?")) == \
        (missing.status_code, missing.json()["error"]["message"].replace("team-b-none", "?")) == \
        (404, "No vector store found with id '?'.")
    tools = [{"type": "file_search", "vector_store_ids": ["team-b-notes", INDEX]}]
    refused = httpx.post(f"{base}/v1/responses", headers=as_b, json={"input": "notes?", "tools": tools}, timeout=60)
    assert refused.status_code == 404
    assert refused.json()["error"] == {"message": f"No vector store found with id '{INDEX}'.", "type": "not_found_error",
                                       "code": 404, "param": "tools.vector_store_ids"}
    # creating: a generated id outside the writer's patterns is refused with the way out; a name inside works
    as_writer = {"Authorization": f"Bearer {WRITE_A}"}
    denied = httpx.post(f"{base}/v1/vector_stores", headers=as_writer, json={"name": "FAQ"})
    assert denied.status_code == 403 and "index_name" in denied.json()["error"]["message"]
    made = httpx.post(f"{base}/v1/vector_stores", headers=as_writer, json={"name": "FAQ", "index_name": "team-a-faq"})
    assert made.status_code == 200 and made.json()["id"] == "team-a-faq", made.text
    other = httpx.post(f"{base}/v1/vector_stores", headers=as_writer, json={"index_name": "team-b-faq"})
    assert other.status_code == 403


def test_vector_store_search_and_file_search_go_through_document_acls(engine):
    base, *_ = engine
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    index = "team-a-acl"
    docs = [{"doc_id": "open", "text": "The pump manual says to check the oil weekly.", "metadata": {"team": "a"}},
            {"doc_id": "writers", "text": "The pump manual's override code is 4711.",
             "metadata": {"acl": ["user:writer-a"], "team": "a"}}]
    assert httpx.post(f"{base}/index", headers=admin, json={"index_name": index, "documents": docs},
                      timeout=60).status_code == 200

    def found(key: str) -> tuple[set[str], set[str]]:
        auth = {"Authorization": f"Bearer {key}"}
        hits = httpx.post(f"{base}/v1/vector_stores/{index}/search", headers=auth, timeout=60,
                          json={"query": "pump manual", "max_num_results": 10}).json()["data"]
        answer = httpx.post(f"{base}/v1/responses", headers=auth, timeout=60, json={
            "input": "What does the pump manual say?", "include": ["file_search_call.results"],
            "tools": [{"type": "file_search", "vector_store_ids": [index], "ranking_options": {"score_threshold": 0}}]})
        return {h["file_id"] for h in hits}, {r["file_id"] for r in answer.json()["output"][0]["results"]}

    assert found(READ_A) == ({"open"}, {"open"})  # no entry on the ACL: the document is not there for them
    assert found(WRITE_A) == ({"open", "writers"}, {"open", "writers"})
    assert found(ADMIN_KEY) == ({"open", "writers"}, {"open", "writers"})


def test_only_ones_own_uploads_can_be_attached_to_a_store(engine):
    base, *_ = engine
    _ensure_index(base)
    as_writer, as_reader = {"Authorization": f"Bearer {WRITE_A}"}, {"Authorization": f"Bearer {READ_A}"}
    mine = httpx.post(f"{base}/v1/files", headers=as_writer, data={"purpose": "assistants"},
                      files={"file": ("w.txt", b"The writer's notes.", "text/plain")}).json()["id"]
    theirs = httpx.post(f"{base}/v1/files", headers=as_reader, data={"purpose": "assistants"},
                        files={"file": ("r.txt", b"The reader's notes.", "text/plain")}).json()["id"]
    url = f"{base}/v1/vector_stores/{INDEX}"
    other = httpx.post(f"{url}/files", headers=as_writer, json={"file_id": theirs})
    assert (other.status_code, other.json()["error"]["message"]) == (404, f"No such file: '{theirs}'.")
    batch = httpx.post(f"{url}/file_batches", headers=as_writer, json={"file_ids": [mine, theirs]})
    assert batch.status_code == 404
    assert httpx.post(f"{url}/files", headers=as_writer, json={"file_id": mine}).status_code == 200
    admin = httpx.post(f"{url}/files", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, json={"file_id": theirs})
    assert admin.status_code == 200  # admins may attach anyone's upload


def test_a_stored_response_is_its_creators(engine):
    base, *_ = engine
    _ensure_index(base)
    as_a, as_b = {"Authorization": f"Bearer {READ_A}"}, {"Authorization": f"Bearer {READ_B}"}
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    made = httpx.post(f"{base}/v1/responses", headers=as_a, timeout=60, json={
        "input": "What does the runbook keep?", "tools": [{"type": "file_search", "vector_store_ids": [INDEX]}]})
    assert made.status_code == 200, made.text  # no LLM here: the extractive answer
    rid = made.json()["id"]
    assert httpx.get(f"{base}/v1/responses/{rid}", headers=as_a).status_code == 200
    assert httpx.get(f"{base}/v1/responses/{rid}", headers=admin).status_code == 200
    for method, path in (("GET", f"/v1/responses/{rid}"), ("GET", f"/v1/responses/{rid}/input_items"),
                         ("DELETE", f"/v1/responses/{rid}")):
        other = httpx.request(method, f"{base}{path}", headers=as_b)
        assert (other.status_code, other.json()["error"]["message"]) == (404, f"Response with id '{rid}' not found.")
    follow = httpx.post(f"{base}/v1/responses", headers=as_b, json={"input": "and?", "previous_response_id": rid})
    assert follow.status_code == 404 and follow.json()["error"]["param"] == "previous_response_id"


def test_api_documentation_needs_credentials(engine):
    base, *_ = engine
    for path in sorted(SPEC_ROUTES):
        assert httpx.get(base + path).status_code == 401, path
        assert httpx.get(base + path, headers={"Authorization": f"Bearer {READ_A}"}).status_code == 200, path


def _status_with(base: str, key: str) -> int:
    return httpx.get(f"{base}/indexes", headers={"Authorization": f"Bearer {key}"}).status_code


def _wait_for(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_access_file_changes_apply_without_restart_and_bad_edits_change_nothing(engine):
    base, _app, _spec, access_file = engine
    new_key = "fresh-key-0123456789abcdef"
    try:
        _write_access(access_file, {"keys": [*ACCESS["keys"], {"name": "fresh", "key": new_key,
                                                               "indexes": ["*"], "role": "read"}]})
        _wait_for(lambda: _status_with(base, new_key) == 200, "the new key to be accepted")
        for bad in ("keys: [ {name: x, key: short", {"keys": [{"name": "x", "key": "k" * 20, "indexes": ["*"],
                                                               "role": "owner"}]}):
            errors_before = _reload_errors(base)
            tmp = access_file.with_suffix(".tmp")
            tmp.write_text(bad if isinstance(bad, str) else json.dumps(bad))
            tmp.replace(access_file)
            _wait_for(lambda before=errors_before: _reload_errors(base) > before, "the bad file to be refused")
            assert _status_with(base, new_key) == 200  # the last good rules still serve
            assert _status_with(base, "k" * 20) == 401  # nothing opened up
    finally:
        _write_access(access_file, ACCESS)
        _wait_for(lambda: _status_with(base, new_key) == 401, "the original rules to be back")


def _reload_errors(base: str) -> float:
    return _counter(httpx.get(f"{base}/metrics").text, 'ragengine_access_reloads_total{outcome="error"}')


def _counter(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize(("content", "fragment"), [
    ("keys: [", "not valid YAML"),
    (json.dumps({"keys": [{"name": "a", "key": "k" * 20, "indexes": ["*"], "role": "owner"}]}), "unknown role 'owner'"),
    (json.dumps({"keys": [{"name": "a", "key": "k" * 20, "keySha256": "0" * 64, "indexes": ["*"],
                           "role": "read"}]}), "exactly one of 'key' and 'keySha256'"),
    (json.dumps({"keys": [{"name": "a", "key": "k" * 20, "indexes": ["*"], "role": "read", "rol": "x"}]}),
     "Extra inputs are not permitted"),
    (json.dumps({"keys": [{"name": "a", "key": "k" * 20, "indexes": ["*"], "role": "read"},
                          {"name": "a", "key": "j" * 20, "indexes": ["*"], "role": "read"}]}), "repeated: a"),
    (json.dumps({"users": []}), "Extra inputs are not permitted"),
    (json.dumps({"serviceAccounts": [{"namespace": "shop", "name": "frontend", "indexes": ["*"], "role": "read"}]}),
     "serviceAccounts need 'audience'"),
    (json.dumps({"audience": "x", "serviceAccounts": [{"namespace": "shop", "name": "frontend", "indexes": ["*"],
                                                       "role": "reader"}]}), "unknown role 'reader'"),
    (json.dumps({"audience": "x", "serviceAccounts": [{"namespace": "shop", "name": "a", "indexes": ["*"],
                                                       "role": "read"}] * 2}), "repeated: shop/a"),
    (json.dumps({"keys": [{"name": "a", "key": "k" * 20, "indexes": ["*"], "role": "read",
                           "limits": {"requestsPerMinute": 0}}]}), "greater than or equal to 1"),
    (json.dumps({"defaultLimits": {"requestsPerMinut": 5}}), "Extra inputs are not permitted"),
])
def test_a_bad_access_file_stops_the_start_with_a_clear_message(tmp_path, content, fragment):
    from ragengine.access.source import AccessConfigError
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    path = tmp_path / "access.yaml"
    path.write_text(content)
    with pytest.raises(AccessConfigError) as err:
        create_app(EngineSettings(access_file=path, data_dir=tmp_path / "data"))
    assert str(path) in str(err.value) and fragment in str(err.value)


def test_a_missing_access_file_stops_the_start(tmp_path):
    from ragengine.access.source import AccessConfigError
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    with pytest.raises(AccessConfigError, match="cannot be read"):
        create_app(EngineSettings(access_file=tmp_path / "nope.yaml", data_dir=tmp_path / "data"))


def test_a_route_without_a_rule_is_refused():
    from ragengine.access.routes import uncovered

    assert uncovered([("get", "/health"), ("head", "/health")]) == []
    assert uncovered([("get", "/health"), ("post", "/v1/new-thing")]) == ["POST /v1/new-thing"]


def test_denials_are_audited(engine, caplog):
    base, *_ = engine
    _ensure_index(base)
    with caplog.at_level("WARNING", logger="ragengine.access"):
        httpx.delete(f"{base}/indexes/{INDEX}", headers={"Authorization": f"Bearer {READ_A}"})
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ragengine.access"]
    assert {"event": "access_denied", "principal": "key:reader-a", "method": "DELETE",
            "route": "/indexes/{index_name}", "index": INDEX, "reason": "role", "status": 403} in lines
    metrics = httpx.get(f"{base}/metrics").text
    assert _counter(metrics, 'ragengine_access_decisions_total{kind="key",outcome="role",principal="reader-a"}') >= 1


def test_no_credentials_configured_means_open(server):
    assert httpx.get(f"{server}/indexes").status_code == 200
    assert httpx.get(f"{server}/openapi.json").status_code == 200


def test_an_index_pattern_that_matches_nothing_is_warned_about(tmp_path, embedder, caplog):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import serve_engine

    access_file = tmp_path / "access.yaml"
    rules = {"keys": [{"name": "typo", "key": READ_A, "indexes": ["taem-a-*", "team-a-*"], "role": "read"}]}
    _write_access(access_file, rules)
    app = create_app(EngineSettings(api_key=ADMIN_KEY, access_file=access_file, data_dir=tmp_path / "data"))
    with caplog.at_level("WARNING", logger="ragengine.access"), serve_engine(app, embedder) as base:
        assert httpx.post(f"{base}/index", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60,
                          json={"index_name": INDEX, "documents": [{"text": "x"}]}).status_code == 200
        assert app.state.access.warnings == ["key 'typo': index pattern 'taem-a-*' matches no index (yet)",
                                             "key 'typo': index pattern 'team-a-*' matches no index (yet)"]
        _write_access(access_file, {"keys": [{**rules["keys"][0], "role": "write"}]})  # a reload checks again
        _wait_for(lambda: app.state.access.warnings == [
            "key 'typo': index pattern 'taem-a-*' matches no index (yet)"], "the reload's warnings")
        assert _status_with(base, READ_A) == 200  # a warning, not an error: the rules serve
    assert any("'taem-a-*' matches no index" in r.getMessage() for r in caplog.records)


def test_a_session_disappears_for_a_principal_that_no_longer_sees_its_index(engine):
    base, *_ = engine
    _ensure_index(base)
    as_a = {"Authorization": f"Bearer {READ_A}"}
    sid = httpx.post(f"{base}/v1/sessions", headers=as_a, json={"index_name": INDEX}).json()["id"]
    assert httpx.get(f"{base}/v1/sessions/{sid}", headers=as_a).status_code == 200
    access_file = engine[3]
    narrowed = {"keys": [{**k, "indexes": ["team-z-*"]} if k["name"] == "reader-a" else k for k in ACCESS["keys"]]}
    try:
        _write_access(access_file, narrowed)
        _wait_for(lambda: httpx.get(f"{base}/v1/sessions/{sid}", headers=as_a).status_code == 404,
                  "the session to be hidden")
        r = httpx.post(f"{base}/v1/sessions/{sid}/messages", headers=as_a, json={"content": "runbook?"})
        assert r.status_code == 404 and r.json()["error"]["message"] == f"No such session: '{sid}'."
        assert sid not in [s["id"] for s in httpx.get(f"{base}/v1/sessions", headers=as_a).json()["data"]]
    finally:
        _write_access(access_file, ACCESS)
        _wait_for(lambda: httpx.get(f"{base}/v1/sessions/{sid}", headers=as_a).status_code == 200, "the session back")
