"""GET /ready: 200 when the engine can serve what it serves itself (embeddings, store), whatever the LLM
does; 503 with the reason otherwise. The LLM is reported beside the checks (and in /health), never gates
readiness. /health stays shallow. Real uvicorn servers, the vLLM-like test LLM."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

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
