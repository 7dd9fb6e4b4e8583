"""GET /ready: 200 only when the engine can answer (LLM serving the model, embeddings, store);
503 with the reason otherwise. /health stays shallow. Real uvicorn servers, the vLLM-like test LLM."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.llm_server import FakeLLM, create_llm_app
from tests.support.server import refused_port, serve_app


def test_ready_with_a_serving_llm_and_the_local_model(make_server):
    with serve_app(create_llm_app(FakeLLM(model="qwen"))) as llm, \
            make_server(llm_url=f"{llm}/v1", llm_model="qwen") as (base, _):
        resp = httpx.get(f"{base}/ready")
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"ready": True, "checks": {"llm": "ok", "embeddings": "ok", "store": "ok"}}


@pytest.fixture
def dead_port() -> Iterator[int]:
    with refused_port() as port:
        yield port


def test_unreachable_llm_is_not_ready_but_alive(make_server, dead_port):
    dead = f"http://127.0.0.1:{dead_port}/v1"
    with make_server(llm_url=dead) as (base, _):
        resp = httpx.get(f"{base}/ready")
        assert resp.status_code == 503
        body = resp.json()
        assert body["ready"] is False and "unreachable" in body["checks"]["llm"] and dead in body["reason"]
        assert body["checks"]["embeddings"] == "ok"
        assert httpx.get(f"{base}/health").status_code == 200  # liveness stays shallow


def test_llm_not_serving_the_configured_model(make_server):
    with serve_app(create_llm_app(FakeLLM(model="other"))) as llm, \
            make_server(llm_url=f"{llm}/v1", llm_model="qwen") as (base, _):
        resp = httpx.get(f"{base}/ready")
        assert resp.status_code == 503 and "does not serve model 'qwen'" in resp.json()["reason"]


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
        assert "llm" not in body["checks"]  # retrieval-only: no LLM to check


def test_ready_is_open_when_auth_is_on(make_server):
    with make_server(api_key="k") as (base, _):
        assert httpx.get(f"{base}/ready").status_code == 200
        assert httpx.get(f"{base}/indexes").status_code == 401
