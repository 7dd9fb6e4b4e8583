"""/openapi.json declares what the engine really answers: every route, every error status and its body.

Before issue 15 the spec declared FastAPI's default 422 body (``{"detail": [...]}``) and no other
error, while the engine answered ``{"detail": "..."}`` with 400/404/409/413 (and OpenAI's error
object under /v1/): clients generated from the spec mis-read the engine's errors.
"""

from __future__ import annotations

import httpx
import jsonschema_rs
import pytest

from tests.support.engine_process import engine_process
from tests.support.routes import operations

HUGE = "10079115782532462804992"


@pytest.fixture(scope="module")
def spec(engine) -> dict:
    return httpx.get(f"{engine.base_url}/openapi.json", timeout=30).json()


def assert_conforms(spec: dict, method: str, template: str, resp: httpx.Response) -> None:
    """``resp``'s status is declared for the operation and its JSON body matches the declared schema."""
    operation = spec["paths"][template][method.lower()]
    declared = operation["responses"]
    assert str(resp.status_code) in declared, (method, template, resp.status_code, sorted(declared), resp.text)
    schema = declared[str(resp.status_code)]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.validator_for({**schema, "components": spec["components"]})
    errors = [e.message for e in validator.iter_errors(resp.json())]
    assert not errors, (method, template, resp.status_code, resp.text, errors)


def test_every_route_is_an_operation(spec):
    from ragengine.app import create_app

    routes = operations(create_app(), documented=True)
    assert len(routes) >= 30
    assert routes == {(m, p) for p, item in spec["paths"].items() for m in item}


# The findings of issue 15 (seed-independent), then one of each kind of error per route family.
CASES = [
    ("POST", "/index", "/index", {"json": {"index_name": "x", "documents": [{"text": 5}]}}, 422),
    ("POST", "/index", "/index", {"content": b'{"index_name": ', "headers": {"content-type": "application/json"}}, 400),
    ("POST", "/index", "/index", {"json": {"index_name": "a/b", "documents": [{"text": "x"}]}}, 400),
    ("POST", "/index", "/index", {"json": {"index_name": "seeded", "documents": [{"doc_id": "doc-bm25", "text": "new"}]}},
     409),
    ("POST", "/indexes/{index_name}/documents", "/indexes/seeded/documents", {"json": {"documents": "nope"}}, 422),
    ("POST", "/indexes/{index_name}/documents", "/indexes/missing/documents", {"json": {"documents": []}}, 404),
    ("POST", "/indexes/{index_name}/documents/metadata", "/indexes/seeded/documents/metadata",
     {"json": {"documents": [{"doc_id": "doc-bm25"}]}}, 422),
    ("POST", "/indexes/{index_name}/documents/metadata", "/indexes/missing/documents/metadata", {"json": {"documents": []}}, 404),
    ("POST", "/indexes/{index_name}/documents/delete", "/indexes/seeded/documents/delete", {"json": {"doc_ids": [1]}}, 422),
    ("POST", "/indexes/{index_name}/documents/delete", "/indexes/missing/documents/delete", {"json": {"doc_ids": []}}, 404),
    ("POST", "/load/{index_name}", "/load/copy", {"params": {"overwrite": "null"}}, 422),
    ("POST", "/load/{index_name}", "/load/copy", {"params": {"path": "../outside"}}, 400),
    ("GET", "/indexes/{index_name}/documents", "/indexes/seeded/documents", {"params": {"offset": HUGE}}, 422),
    ("POST", "/retrieve", "/retrieve", {"json": {"index_name": "missing", "query": "q"}}, 404),
    ("GET", "/v1/sessions", "/v1/sessions", {"params": {"offset": HUGE}}, 400),
    ("GET", "/v1/sessions/{session_id}", "/v1/sessions/nope", {}, 404),
    ("POST", "/v1/sessions/{session_id}/messages", "/v1/sessions/nope/messages", {"json": {"content": ""}}, 400),
    ("POST", "/v1/chat/completions", "/v1/chat/completions", {"json": {"messages": "x"}}, 400),
    ("POST", "/v1/chat/completions", "/v1/chat/completions", {"json": {"messages": [{"role": "user", "content": "q"}],
                                                                       "index_name": "missing"}}, 404),
    ("GET", "/v1/vector_stores/{vector_store_id}", "/v1/vector_stores/missing", {}, 404),
    ("POST", "/v1/vector_stores/{vector_store_id}/search", "/v1/vector_stores/seeded-store/search",
     {"json": {"query": "q", "filters": {"type": "like", "key": "k", "value": 1}}}, 400),
    ("POST", "/v1/vector_stores/{vector_store_id}/files", "/v1/vector_stores/seeded-store/files",
     {"json": {"file_id": "file_missing"}}, 404),
    ("GET", "/v1/vector_stores", "/v1/vector_stores", {"params": {"after": "vs_not_listed"}}, 400),
    ("POST", "/v1/responses", "/v1/responses", {"json": {"input": "q", "tools": [{"type": "web_search"}]}}, 400),
    ("POST", "/v1/responses", "/v1/responses", {"json": {"input": "q", "previous_response_id": "resp_missing"}}, 404),
    ("GET", "/v1/responses/{response_id}", "/v1/responses/resp_missing", {}, 404),
    ("POST", "/v1/files", "/v1/files", {"files": {"file": ("a.gif", b"GIF89a" + bytes(20), "image/gif")}}, 415),
]


@pytest.mark.parametrize(("method", "template", "path", "kwargs", "status"), CASES,
                         ids=[f"{c[0]} {c[2]} -> {c[4]}" for c in CASES])
def test_error_responses_match_the_published_schema(engine, spec, method, template, path, kwargs, status):
    resp = httpx.request(method, f"{engine.base_url}{path}", timeout=60, **kwargs)
    assert resp.status_code == status, resp.text
    assert_conforms(spec, method, template, resp)


def test_v1_errors_are_openai_shaped_and_kaito_errors_are_detail(spec):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                ref = response["content"]["application/json"]["schema"]["$ref"]
                expected = "OpenAIErrorResponse" if path.startswith("/v1/") else "ErrorDetail"
                assert ref.endswith(f"/{expected}"), (method, path, status, ref)


def test_chat_without_an_llm_is_a_declared_503(tmp_path):
    """A retrieval-only engine (no LLM configured) refuses plain chat with a 503 its spec declares."""
    with engine_process(tmp_path, llm=False) as engine:
        spec = httpx.get(f"{engine.base_url}/openapi.json", timeout=30).json()
        resp = httpx.post(f"{engine.base_url}/v1/chat/completions", timeout=60,
                          json={"messages": [{"role": "user", "content": "hello"}]})
        assert resp.status_code == 503, resp.text
        assert_conforms(spec, "POST", "/v1/chat/completions", resp)
        assert "RAGENGINE_LLM_URL" in resp.json()["error"]["message"]


def test_with_access_control_a_route_that_may_hide_declares_its_404(tmp_path):
    """Found by the fuzzer with access control on (issue 41): ``PUT /indexes/{name}/evaluations/golden-set``
    answered a reader the 404 of an index it may not see ("No such index"), a status it did not declare.
    Every route whose rule takes an index from the request (but those that create it: 403) or owns what its
    path names declares it, with access control on."""
    from ragengine.access.routes import ROUTES
    from ragengine.api.openapi import hides
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    paths = create_app(EngineSettings(api_key="admin-key-0123456789abcdef", data_dir=tmp_path)).openapi()["paths"]
    assert "404" in paths["/indexes/{index_name}/evaluations/golden-set"]["put"]["responses"]
    assert "404" not in paths["/index"]["post"]["responses"]  # a name it may not create is a 403
    documented = [(m, p) for (m, p) in ROUTES if p in paths and m.lower() in paths[p]]
    assert len(documented) > 50
    for method, path in documented:
        assert ("404" in paths[path][method.lower()]["responses"]) >= hides(ROUTES[(method, path)]), (method, path)
