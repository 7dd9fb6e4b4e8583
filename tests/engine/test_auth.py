"""With settings.api_key set, every route but the probes needs the bearer token.

The routes are taken from the app's own route table and its /openapi.json, so a route added
tomorrow is covered the day it is added. Open on purpose (auth.OPEN_PATHS, documented in the
README): /health and /ready for the kubelet's probes, /metrics for Prometheus; none of them
reveals documents or accepts writes. Everything else, /openapi.json and /docs included, needs the key.
"""

from __future__ import annotations

import re

import httpx
import jsonschema_rs
import pytest

from ragengine.auth import OPEN_PATHS
from tests.support.routes import operations

KEY = "s3cret"
OPEN_BY_DESIGN = {"/health", "/ready", "/metrics"}
SPEC_ROUTES = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def _url(base: str, path: str) -> str:
    return base + re.sub(r"\{[^}]+\}", "x", path)


def _request(base: str, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    body = {"json": {}} if method in ("post", "put", "patch") else {}
    return httpx.request(method.upper(), _url(base, path), headers=headers, timeout=60, **body)


@pytest.fixture(scope="module")
def authed(embedder, tmp_path_factory):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import borrowed
    from tests.support.server import serve_app

    app = create_app(EngineSettings(api_key=KEY, data_dir=tmp_path_factory.mktemp("auth") / "data"))
    with borrowed(embedder) as own:
        app.state.embedder = own
        with serve_app(app) as base:
            spec = httpx.get(f"{base}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
            yield base, app, spec


def test_open_paths_are_the_documented_ones():
    assert set(OPEN_PATHS) == OPEN_BY_DESIGN


def test_route_table_and_openapi_agree(authed):
    _base, app, spec = authed
    assert operations(app) == {(m, p) for p, item in spec["paths"].items() for m in item}


def test_every_operation_without_a_key_is_refused_unless_open(authed):
    base, _app, spec = authed
    checked = 0
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
                resp = _request(base, method, path, headers)
                if path in OPEN_BY_DESIGN:
                    assert resp.status_code != 401, (method, path)
                    continue
                assert resp.status_code == 401, (method, path, headers, resp.status_code)
                assert resp.headers["www-authenticate"] == "Bearer"
                schema = operation["responses"]["401"]["content"]["application/json"]["schema"]
                validator = jsonschema_rs.validator_for({**schema, "components": spec["components"]})
                assert validator.is_valid(resp.json()), (method, path, resp.text)
                message = resp.json()["error"]["message"] if path.startswith("/v1/") else resp.json()["detail"]
                assert "Authorization: Bearer" in message
                checked += 1
    assert checked >= 3 * 25  # every protected operation, three ways


def test_every_operation_with_the_key_gets_past_auth(authed):
    base, _app, spec = authed
    for path, item in spec["paths"].items():
        for method in item:
            resp = _request(base, method, path, {"Authorization": f"Bearer {KEY}"})
            assert resp.status_code != 401, (method, path, resp.text)
            assert resp.status_code < 500, (method, path, resp.text)


@pytest.mark.parametrize("path", sorted(SPEC_ROUTES))
def test_api_documentation_needs_the_key(authed, path):
    base, _app, _spec = authed
    assert httpx.get(base + path).status_code == 401
    assert httpx.get(base + path, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_no_api_key_means_open(server):
    assert httpx.get(f"{server}/indexes").status_code == 200
    assert httpx.get(f"{server}/openapi.json").status_code == 200
