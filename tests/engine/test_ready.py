"""GET /ready: 200 when the engine can serve what it serves itself (embeddings, store), whatever the LLM
does; 503 with the reason otherwise. The LLM is reported beside the checks (and in /health), never gates
readiness. /health stays shallow. Real uvicorn servers, the vLLM-like test LLM."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from ragengine.redact import redact_text, redact_url
from tests.llm_server import FakeLLM, create_llm_app
from tests.support.server import refused_port, serve_app


@pytest.fixture
def dead_port() -> Iterator[int]:
    with refused_port() as port:  # bound, never listening: refused for the whole test
        yield port


def test_ready_with_a_serving_llm_and_the_local_model(make_server):
    with serve_app(create_llm_app(FakeLLM(model="qwen"))) as llm, \
            make_server(llm_url=f"{llm}/v1", llm_model="qwen") as (base, _):
        resp = httpx.get(f"{base}/ready")
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["ready"] is True and body["checks"] == {"embeddings": "ok", "store": "ok"}
        assert body["llm"]["available"] is True and body["llm"]["reason"] is None


def test_llm_not_serving_the_configured_model_is_reported_not_gating(make_server):
    with serve_app(create_llm_app(FakeLLM(model="other"))) as llm, \
            make_server(llm_url=f"{llm}/v1", llm_model="qwen") as (base, _):
        resp = httpx.get(f"{base}/ready")
        assert resp.status_code == 200 and resp.json()["llm"]["available"] is False
        assert "does not serve model 'qwen'" in resp.json()["llm"]["reason"]


def test_unreachable_embeddings_url_and_store_health(make_server, dead_port):
    dead = f"http://127.0.0.1:{dead_port}/v1"

    class DownStore:
        def status(self):
            return {"corrupt": {}}

        async def health(self):
            return "postgres at db:5432 refused the connection"

    with make_server(app_state={"registry": DownStore()}) as (base, app):
        app.state.registry = DownStore()  # after start-up, which builds the real registry
        app.state.settings.embedding_url = dead
        resp = httpx.get(f"{base}/ready")
        body = resp.json()
        assert resp.status_code == 503
        assert "embeddings at" in body["checks"]["embeddings"] and body["checks"]["store"].startswith("postgres at db")
        assert "llm" not in body["checks"] and body["llm"]["configured"] is False  # retrieval-only


def test_ready_is_open_when_auth_is_on(make_server):
    with make_server(api_key="k") as (base, _):
        assert httpx.get(f"{base}/ready").status_code == 200
        assert httpx.get(f"{base}/indexes").status_code == 401


def test_open_probes_show_status_only_without_the_key(make_server, dead_port):
    """Issue 22: with an API key set, the unauthenticated /health, /metrics and /ready named every
    index (with counts) and the LLM's URL. Without the key they now show status only; with it, all."""
    dead = f"http://127.0.0.1:{dead_port}/v1"
    key = {"Authorization": "Bearer k"}
    with make_server(api_key="k", llm_url=dead) as (base, _):
        r = httpx.post(f"{base}/index", headers=key, timeout=60,
                       json={"index_name": "hr-layoff-plan-2026", "documents": [{"text": "private"}]})
        assert r.status_code == 200, r.text
        health = httpx.get(f"{base}/health")
        assert health.status_code == 200 and set(health.json()) == {"status", "detail", "llm"}, health.text
        assert health.json()["status"] == "Healthy" and "reason" not in health.json()["llm"]
        assert httpx.get(f"{base}/health", headers=key).json()["indexes"]["hr-layoff-plan-2026"]["documents"] == 1
        public = httpx.get(f"{base}/metrics").text
        assert "hr-layoff-plan-2026" not in public and "ragengine_http_requests_total" in public
        assert 'ragengine_index_documents{index="hr-layoff-plan-2026"} 1.0' in httpx.get(f"{base}/metrics",
                                                                                          headers=key).text
        ready = httpx.get(f"{base}/ready")  # the LLM never gates readiness; its reason names its URL
        assert ready.status_code == 200 and "127.0.0.1" not in ready.text, ready.text
        assert ready.json()["llm"]["available"] is False and "reason" not in ready.json()["llm"]
        detailed = httpx.get(f"{base}/ready", headers=key)
        assert detailed.status_code == 200 and "127.0.0.1" in detailed.json()["llm"]["reason"], detailed.text
        wrong = httpx.get(f"{base}/health", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 200 and "indexes" not in wrong.json()


def test_credentials_in_llm_and_embedding_urls_are_never_echoed(make_server, caplog, dead_port):
    """Issue 22: ``/ready`` said ``LLM at http://svc-user:Pa55w0rd@... is unreachable``, and the HTTP
    client (httpx then) logged every request's full URL. Userinfo and key-like query values are masked everywhere."""
    caplog.set_level(logging.INFO)
    with serve_app(create_llm_app(FakeLLM(model="qwen"))) as llm:
        port = llm.rsplit(":", 1)[1]
        good = f"http://svc-user:Pa55w0rd@127.0.0.1:{port}/v1"
        dead = f"http://svc-user:Pa55w0rd@127.0.0.1:{dead_port}/v1"
        with make_server(llm_url=dead, llm_fallback_urls=[good], llm_model="qwen", llm_retries=0) as (base, app):
            ready = httpx.get(f"{base}/ready")
            assert ready.status_code == 200 and "***@127.0.0.1" in ready.json()["llm"]["reason"], ready.text
            chat = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                              json={"model": "qwen", "messages": [{"role": "user", "content": "hi"}]})
            assert chat.status_code == 200, chat.text
            app.state.settings.embedding_url = f"http://127.0.0.1:{dead_port}/v1?api_key=sk-live-123"
            ready = httpx.get(f"{base}/ready")
            assert "api_key=***" in ready.json()["checks"]["embeddings"], ready.text
            seen = ready.text + chat.text
    seen += caplog.text
    assert "LLM endpoint failed: http://***@127.0.0.1" in caplog.text  # the fallback chain's log line, masked
    assert "Pa55w0rd" not in seen and "sk-live-123" not in seen


def test_redact_url_keeps_the_endpoint_and_masks_credentials():
    assert redact_url("https://u:p@llm.example:8443/v1?x=1&api_key=s&Token=t") == \
        "https://***@llm.example:8443/v1?x=1&api_key=***&Token=***"
    assert redact_url("http://vllm.ns.svc:8000/v1") == "http://vllm.ns.svc:8000/v1"
    assert redact_text("LLM at postgresql://app:pw@db/x failed; see http://h/a?sig=1") == \
        "LLM at postgresql://***@db/x failed; see http://h/a?sig=***"
