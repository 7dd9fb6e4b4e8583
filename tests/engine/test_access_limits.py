"""Rate limits per principal: requests and LLM tokens per minute, from the access file.

The window arithmetic runs on a clock of the test's own (no waiting on minutes); the HTTP tests check
the 429 and its ``Retry-After`` on a real engine, the token limit with a real (scripted) LLM, and that two
engines sharing one PostgreSQL share one limit.
"""

from __future__ import annotations

import contextlib
import json
import time

import httpx
import pytest
from sqlalchemy import text

from ragengine.access.limits import UsageCounter, estimate, wait_s
from ragengine.conversations.models import UsageRow
from tests.conversations.scripted_llm import ScriptedLLM, create_scripted_app
from tests.support.embedding import serve_engine
from tests.support.server import serve_app

ADMIN = "admin-0123456789abcdef"
LIMITED, TALKER, FREE = "limited-0123456789abcdef", "talker-0123456789abcdef", "free-key-0123456789abcdef"
ACCESS = {
    "keys": [
        {"name": "limited", "key": LIMITED, "indexes": ["*"], "role": "read", "limits": {"requestsPerMinute": 3}},
        {"name": "talker", "key": TALKER, "indexes": ["*"], "role": "read", "limits": {"tokensPerMinute": 50}},
        {"name": "free", "key": FREE, "indexes": ["*"], "role": "read", "limits": {}},
    ],
    "defaultLimits": {"requestsPerMinute": 1000},
}


def test_window_arithmetic():
    assert estimate(60, 0, 30) == 30 and estimate(60, 10, 60) == 10
    assert wait_s(0, 2, 10, 3, 1) == 0  # room now
    assert wait_s(0, 3, 10, 3, 1) == pytest.approx(50 + 60 * (1 - 2 / 3))  # next minute, then 1/3 of it aged out
    assert wait_s(6, 0, 0, 3, 1) == pytest.approx(60 * (1 - 2 / 6))  # later this minute
    assert estimate(6, 0, wait_s(6, 0, 0, 3, 1)) + 1 == pytest.approx(3)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_counter_counts_what_it_admits_and_says_when_to_retry(db, tmp_path, request):
    from ragengine.conversations.store import SessionStore

    url = f"sqlite:///{tmp_path / 's.db'}" if db == "sqlite" else _fresh_db(request)
    store = SessionStore(url)
    store.create_tables()
    clock = Clock(600 * 60.0 + 10)  # 10 s into a minute
    counter = UsageCounter(store.engine, UsageRow.__table__, clock)
    assert [await counter.take_request("key:a", 3) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = await counter.take_request("key:a", 3)
    assert wait == pytest.approx(wait_s(0, 3, 10, 3, 1))  # refused, and the refusal was not counted:
    clock.t += wait + 0.01
    assert await counter.take_request("key:a", 3) == 0.0  # exactly when Retry-After said
    assert await counter.take_request("key:b", 3) == 0.0  # another principal has its own count
    await counter.add_tokens("key:a", 40)
    assert await counter.tokens_wait("key:a", 50) == 0.0
    await counter.add_tokens("key:a", 20)
    assert await counter.tokens_wait("key:a", 50) > 0
    longest = "serviceaccount:" + "n" * 63 + "/" + "a" * 253  # the longest principal id there can be
    assert await counter.take_request(longest, 3) == 0.0
    assert (await store.create_session(principal=longest)).owner == longest
    clock.t += 3 * 60  # two minutes later the old rows are gone
    assert await counter.take_request("key:a", 3) == 0.0
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM access_usage WHERE principal = 'key:a'")).scalar_one() == 1
    store.close()


def _fresh_db(request) -> str:
    from tests.conversations.conftest import fresh_database

    return fresh_database(request.getfixturevalue("pgvector_url"))


@pytest.fixture(scope="module")
def llm():
    scripted = ScriptedLLM(model="scripted")
    with serve_app(create_scripted_app(scripted)) as base:
        scripted.base = base + "/v1"  # type: ignore[attr-defined]
        yield scripted


@contextlib.contextmanager
def engine(tmp_path, embedder, llm=None, **values):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "access.yaml").write_text(json.dumps(ACCESS))
    settings = EngineSettings(api_key=ADMIN, access_file=tmp_path / "access.yaml", data_dir=tmp_path / "data",
                              llm_url=llm.base if llm else None, **values)
    app = create_app(settings)
    with serve_engine(app, embedder) as base:
        yield base


def get(base: str, key: str, path: str = "/indexes") -> httpx.Response:
    return httpx.get(base + path, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_over_the_request_limit_is_429_with_retry_after(tmp_path, embedder):
    with engine(tmp_path, embedder) as base:
        assert [get(base, LIMITED).status_code for _ in range(3)] == [200, 200, 200]
        r = get(base, LIMITED)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "3 requests per minute" in r.json()["detail"]
        assert get(base, LIMITED, "/v1/models").json()["error"]["type"] == "rate_limit_exceeded"
        assert all(get(base, FREE).status_code == 200 for _ in range(5))  # others are not held up
        assert get(base, ADMIN).status_code == 200
        metrics = httpx.get(base + "/metrics").text
        assert 'ragengine_access_decisions_total{kind="key",outcome="rate_limited",principal="limited"}' in metrics


def test_over_the_token_limit_llm_routes_are_429_others_are_not(tmp_path, embedder, llm):
    long_prompt = "Please summarise the cooling pump restart procedure in detail. " * 4  # ~90 estimated tokens
    with engine(tmp_path, embedder, llm) as base:
        headers = {"Authorization": f"Bearer {TALKER}"}
        # A prompt that alone is more than the 50-token limit is refused before the LLM is asked.
        llm.reset()
        r = httpx.post(f"{base}/v1/chat/completions", headers=headers, timeout=60,
                       json={"messages": [{"role": "user", "content": long_prompt}]})
        assert r.status_code == 429 and "50 LLM tokens per minute" in r.json()["error"]["message"], r.text
        assert int(r.headers["retry-after"]) >= 1 and not llm.chats()
        # A short one goes, its max_tokens lowered to what is left of the minute (the reservation).
        body = {"messages": [{"role": "user", "content": "Restart?"}], "max_tokens": 500}
        assert httpx.post(f"{base}/v1/chat/completions", headers=headers, json=body, timeout=60).status_code == 200
        assert llm.chats()[-1]["max_tokens"] < 50

        def refused(path: str, payload: dict) -> httpx.Response:
            """The route's answers until a 429: a reservation is settled just after its answer (to what the call
            spent), so a refusal while one was outstanding can be followed by an admission of what it gave back.
            Each admission spends, so a route under the limit reaches 429; one outside it never does."""
            deadline = time.monotonic() + 30
            while (r := httpx.post(f"{base}{path}", headers=headers, json=payload, timeout=60)).status_code != 429:
                assert r.status_code == 200, r.text
                assert time.monotonic() < deadline, f"{path}: the tokens were never charged"
            return r

        r = refused("/v1/chat/completions", body)
        assert "50 LLM tokens per minute" in r.json()["error"]["message"] and int(r.headers["retry-after"]) >= 1
        history = [{"role": "user", "content": "How do I restart the cooling pump?"},
                   {"role": "assistant", "content": "Close valve V-7 first."}]
        refused("/v1/chat/reformulate", {"userMessage": "and then?", "conversation": history})
        refused("/v1/responses", {"input": "and then?"})
        assert get(base, TALKER).status_code == 200  # no LLM, no token limit


@pytest.mark.postgres
def test_replicas_sharing_postgresql_share_the_limit(tmp_path, embedder, request):
    url = _fresh_db(request)
    with engine(tmp_path / "a", embedder, database_url=url) as a, engine(tmp_path / "b", embedder, database_url=url) as b:
        assert [get(base, LIMITED).status_code for base in (a, b, a)] == [200, 200, 200]
        assert get(b, LIMITED).status_code == 429
        assert get(a, LIMITED).status_code == 429



@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_concurrent_reservations_never_admit_more_than_the_limit(db, tmp_path, request):
    """Eight calls reserve at once (threads, separate connections): what they are granted, prompt included,
    fits in the limit, on SQLite and on PostgreSQL (where replicas share the row)."""
    import concurrent.futures
    import threading

    from ragengine.conversations.store import SessionStore

    url = f"sqlite:///{tmp_path / 's.db'}" if db == "sqlite" else _fresh_db(request)
    store = SessionStore(url)
    store.create_tables()
    counter = UsageCounter(store.engine, UsageRow.__table__, Clock(700 * 60.0 + 5))
    start = threading.Barrier(8)

    def one(_i: int) -> tuple[int, int, float]:
        start.wait()
        return counter._reserve_tokens("key:burst", 1000, 100, 1, 300)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    admitted = sum(100 + granted for granted, _m, _w in results if granted)
    assert admitted <= 1000, results
    assert sum(1 for granted, _m, _w in results if granted == 300) >= 2, results  # it did admit what fit
    assert all(wait >= 1 for granted, _m, wait in results if not granted), results
    with store.engine.connect() as conn:
        counted = conn.execute(text("SELECT tokens FROM access_usage WHERE principal = 'key:burst'")).scalar_one()
    assert counted == admitted
    # Settling gives back what a call did not spend, and never counts below zero.
    granted, minute, _ = results[0] if results[0][0] else next(r for r in results if r[0])
    counter._settle_tokens("key:burst", minute, 100 + granted, 40)
    with store.engine.connect() as conn:
        after = conn.execute(text("SELECT tokens FROM access_usage WHERE principal = 'key:burst'")).scalar_one()
    assert after == admitted - (100 + granted) + 40
    counter._settle_tokens("key:burst", minute, 10_000, 0)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT tokens FROM access_usage WHERE principal = 'key:burst'")).scalar_one() == 0
    store.close()


def test_concurrent_chat_requests_spend_no_more_than_the_token_limit(tmp_path, embedder):
    """Issue 41: eight concurrent requests spent 40,000 tokens of a 1,000-a-minute limit, because the limit was
    checked before the call and the tokens billed after. Each call now reserves its maximum first."""
    import concurrent.futures

    from tests.llm_server import FakeLLM, create_llm_app

    fake = FakeLLM(model="fake", max_model_len=4096, reply=lambda body: "word " * 5000, first_token_delay_s=0.5)
    burst_key = "burst-0123456789abcdef"
    access = {"keys": [{"name": "burst", "key": burst_key, "indexes": ["*"], "role": "read",
                        "limits": {"tokensPerMinute": 1000}}]}
    (tmp_path / "access.yaml").write_text(json.dumps(access))
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    with serve_app(create_llm_app(fake)) as llm_base:
        settings = EngineSettings(access_file=tmp_path / "access.yaml", data_dir=tmp_path / "data",
                                  llm_url=llm_base + "/v1")
        with serve_engine(create_app(settings), embedder) as base:
            def ask(i: int) -> tuple[int, int]:
                body = {"messages": [{"role": "user", "content": f"Summarise the pump manual, part {i}."}]}
                if i % 2:
                    body.update(stream=True, stream_options={"include_usage": True})
                r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120,
                               headers={"Authorization": f"Bearer {burst_key}"})
                if r.status_code != 200:
                    return r.status_code, 0
                if not i % 2:
                    return 200, r.json()["usage"]["total_tokens"]
                chunks = [json.loads(line[6:]) for line in r.text.splitlines()
                          if line.startswith("data: {") and '"usage"' in line]
                return 200, sum((c.get("usage") or {}).get("total_tokens") or 0 for c in chunks)

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                results = list(pool.map(ask, range(8)))
    spent = sum(tokens for _status, tokens in results)
    print(f"8 concurrent requests, tokensPerMinute 1000: {spent} tokens spent, statuses {[s for s, _ in results]}")
    assert spent <= 1000, results
    assert any(status == 200 and tokens > 0 for status, tokens in results), results
    assert all(status in (200, 429) for status, _ in results), results


def test_uploads_past_a_principals_files_quota_are_413_and_store_nothing(tmp_path, embedder):
    """Issue 41: /v1/files had no storage quota per principal: one key could fill the sessions' database."""
    with engine(tmp_path, embedder, files_quota_bytes=2000) as base:
        def upload(key: str, size: int) -> httpx.Response:
            return httpx.post(f"{base}/v1/files", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                              files={"file": ("notes.txt", b"pump valve " * (size // 11), "text/plain")})

        first = upload(FREE, 1500)
        assert first.status_code == 202, first.text
        refused = upload(FREE, 1000)
        assert refused.status_code == 413, refused.text
        assert "quota of 2000 bytes" in refused.json()["error"]["message"]
        listed = httpx.get(f"{base}/v1/files", headers={"Authorization": f"Bearer {FREE}"}, timeout=60).json()
        assert [f["id"] for f in listed["data"]] == [first.json()["id"]]  # the refused one left nothing
        assert upload(TALKER, 1500).status_code == 202  # another principal's own quota
        deleted = httpx.delete(f"{base}/v1/files/{first.json()['id']}", headers={"Authorization": f"Bearer {FREE}"},
                               timeout=60)
        assert deleted.status_code == 200
        assert upload(FREE, 1000).status_code == 202  # room again
