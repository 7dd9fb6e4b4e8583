"""Every paging and count parameter is bounded: an out-of-range value is a 4xx naming it, never a 500.

Found by Schemathesis (issue 15): ``GET /v1/sessions?offset=10079115782532462804992`` reached the
database unchecked and answered 500.
"""

from __future__ import annotations

import httpx
import pytest

HUGE = "10079115782532462804992"  # larger than any 64-bit integer

# (method, path, parameter) for every integer query parameter of the API.
PAGING_PARAMETERS = [
    ("GET", "/v1/sessions", "offset"),
    ("GET", "/v1/sessions", "limit"),
    ("GET", "/v1/files", "limit"),
    ("GET", "/indexes/seeded/documents", "offset"),
    ("GET", "/indexes/seeded/documents", "limit"),
    ("GET", "/indexes/seeded/documents", "max_text_length"),
    ("GET", "/indexes/seeded/evaluations", "limit"),
    ("GET", "/v1/sessions/any/messages", "last"),
    ("GET", "/v1/vector_stores", "limit"),
    ("GET", "/v1/vector_stores/seeded-store/files", "limit"),
    ("GET", "/v1/vector_stores/seeded-store/file_batches/any/files", "limit"),
    ("GET", "/v1/responses/any/input_items", "limit"),
]


@pytest.mark.parametrize(("method", "path", "param"), PAGING_PARAMETERS)
@pytest.mark.parametrize("value", [HUGE, "-1"])
def test_out_of_range_integer_is_a_4xx_naming_the_parameter(engine, method, path, param, value):
    resp = httpx.request(method, f"{engine.base_url}{path}", params={param: value}, timeout=30)
    assert resp.status_code in (400, 422), resp.text
    body = resp.json()
    message = body["error"]["message"] if path.startswith("/v1/") else body["detail"]
    assert param in message, body
    if path.startswith("/v1/"):
        assert body["error"]["param"] == param, body


def test_largest_accepted_offset_answers_an_empty_page(engine):
    from ragengine.protocol.paging import MAX_OFFSET

    resp = httpx.get(f"{engine.base_url}/v1/sessions", params={"offset": MAX_OFFSET}, timeout=30)
    assert resp.status_code == 200 and resp.json() == {"data": []}
    resp = httpx.get(f"{engine.base_url}/indexes/seeded/documents", params={"offset": MAX_OFFSET}, timeout=30)
    assert resp.status_code == 200 and resp.json()["documents"] == []
