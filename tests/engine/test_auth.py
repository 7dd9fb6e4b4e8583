"""With settings.api_key set, every route but the probes needs the bearer token."""

from __future__ import annotations

import httpx


def test_api_key_is_enforced(make_server):
    with make_server(api_key="s3cret") as (base, _app):
        assert httpx.get(f"{base}/health").status_code == 200
        assert httpx.get(f"{base}/metrics").status_code == 200

        denied = httpx.get(f"{base}/indexes")
        assert denied.status_code == 401
        assert "Authorization: Bearer" in denied.json()["detail"]
        assert httpx.get(f"{base}/indexes", headers={"Authorization": "Bearer wrong"}).status_code == 401

        chat = httpx.post(f"{base}/v1/chat/completions", json={"messages": []})
        assert chat.status_code == 401 and chat.json()["error"]["type"] == "authentication_error"

        ok = httpx.get(f"{base}/indexes", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_no_api_key_means_open(server):
    assert httpx.get(f"{server}/indexes").status_code == 200
