"""Unauthenticated TokenReview amplification (issue 41, finding 4), against the local API server.

The engine reviews ServiceAccount tokens at the real kube-apiserver, through a proxy here that counts the
reviews and, when told, answers as a throttling API server does (429, a Status, ``Retry-After``). Before the
fix every JWT-shaped bearer that was not a key cost one review (300 requests, 300 reviews), refusals could
push accepted tokens out of the one cache, and once the API server throttled every ServiceAccount caller
whose cache entry had lapsed got a 503. Now:

- a bearer whose unverified claims could never be accepted (no ``aud`` of the engine's, no ``sub`` of an
  account with a rule, expired) costs no review;
- forged tokens that could (an account with a rule, the engine's audience, a bad signature) are reviewed
  within a budget per client address (429 past it), which another address does not share;
- refusals are cached apart: they cannot evict an accepted token;
- while the API server throttles, an accepted token is served past its cache period, unknown ones get 503,
  and the engine waits ``Retry-After`` before asking again.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import uuid

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.engine.test_access import ADMIN_KEY
from tests.engine.test_access_serviceaccounts import access_rules, world  # noqa: F401 - the world fixture
from tests.support.embedding import serve_engine
from tests.support.kubernetes import LocalCluster, local_cluster
from tests.support.server import serve_app

pytestmark = pytest.mark.cluster
ATTACK = 300
REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
RETRY_AFTER_S = 5  # what the throttling API server asks for
THROTTLED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 429,
             "reason": "TooManyRequests", "message": "Too many requests, please try again later."}


@pytest.fixture(scope="module")
def cluster() -> LocalCluster:
    return local_cluster()


class ReviewProxy:
    """Passes TokenReviews to the real API server and counts them; ``throttle`` makes it answer 429 instead."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.upstream = cluster.api_url
        self.verify = ssl.create_default_context(cafile=str(cluster.ca_file))
        self.calls, self.throttle = 0, False
        self.app = Starlette(routes=[Route(REVIEW_PATH, self.review, methods=["POST"]),
                                     Route("/readyz", lambda _r: Response("ok"))])

    async def review(self, request: Request) -> Response:
        self.calls += 1
        if self.throttle:
            return JSONResponse(THROTTLED, status_code=429, headers={"Retry-After": str(RETRY_AFTER_S)})
        async with httpx.AsyncClient(verify=self.verify, timeout=10) as http:
            resp = await http.post(self.upstream + REVIEW_PATH, content=await request.body(), headers={
                "Authorization": request.headers["authorization"], "Content-Type": "application/json"})
        return Response(resp.content, status_code=resp.status_code, media_type="application/json")


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def forged(claims: dict) -> str:
    """JWT-shaped, signed by nobody."""
    return f"{_b64({'alg': 'RS256', 'kid': 'x'})}.{_b64(claims)}.{_b64({'sig': uuid.uuid4().hex})}"


def plausible(world: dict) -> str:  # noqa: F811
    """A forgery whose claims could be accepted: an account with a rule, the engine's audience, not expired."""
    return forged({"aud": [world["audience"]], "sub": f"system:serviceaccount:{world['ns']}:frontend",
                   "exp": int(time.time()) + 3600, "jti": uuid.uuid4().hex})


@pytest.fixture
def engine(cluster, world, embedder, tmp_path, monkeypatch):  # noqa: F811
    """An engine reviewing through the proxy; its own token and rules as in test_access_serviceaccounts."""
    from ragengine.access import serviceaccounts
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    def start(monkeypatched_entries: int | None = None, **settings):
        if monkeypatched_entries:
            monkeypatch.setattr(serviceaccounts, "MAX_ENTRIES", monkeypatched_entries)
        (tmp_path / "access.yaml").write_text(json.dumps(access_rules(world)))
        values = {"token_review_cache_s": 30.0, **settings}
        app = create_app(EngineSettings(api_key=ADMIN_KEY, access_file=tmp_path / "access.yaml",
                                        data_dir=tmp_path / "data", kubernetes_api_url=proxy_url,
                                        kubernetes_token_file=world["own_token"], kubernetes_ca_file=None, **values))
        return serve_engine(app, embedder), app

    proxy = ReviewProxy(cluster)
    with serve_app(proxy.app, ready_path="/readyz") as proxy_url:
        yield start, proxy


def get(base: str, token: str, client: httpx.Client | None = None) -> httpx.Response:
    return (client or httpx).get(f"{base}/indexes", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_unauthenticated_bearers_cost_no_review_and_forgeries_a_bounded_few(cluster, world, engine):  # noqa: F811
    start, proxy = engine
    served, app = start()
    with served as base, httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as attacker:
        garbage = [forged({"x": i}) for i in range(ATTACK // 3)] + [
            forged({"aud": ["another"], "sub": f"system:serviceaccount:{world['ns']}:frontend"}) for _ in range(ATTACK // 3)
        ] + [forged({"aud": [world["audience"]], "sub": "system:serviceaccount:elsewhere:app"}) for _ in range(ATTACK // 3)]
        assert {get(base, t, attacker).status_code for t in garbage} == {401}
        garbage_reviews = proxy.calls
        started = time.monotonic()
        answers = [get(base, plausible(world), attacker).status_code for _ in range(ATTACK)]
        forged_reviews = proxy.calls - garbage_reviews
        # the per-address budget (60 a minute): a burst of 10, then one a second while the attack lasts
        bound = 10 + int(time.monotonic() - started) + 1
        # the budget is the attacker's address's: a real app elsewhere is reviewed and accepted at once
        app_token = cluster.create_token(world["ns"], "frontend", world["audience"])
        assert get(base, app_token).status_code == 200
        # still throttled: the budget refills one a second, and the app's request above took a moment on a
        # loaded machine, so a refilled review or two may be spent first (each 401) before the 429
        tries = [get(base, plausible(world), attacker) for _ in range(5)]
        throttled = next((r for r in tries if r.status_code == 429), tries[-1])
    print(f"\n{len(garbage)} JWT-shaped bearers: {garbage_reviews} TokenReviews; {ATTACK} plausible forgeries from one "
          f"address: {forged_reviews} TokenReviews, answers {sorted(set(answers))} ({answers.count(429)} x 429)")
    assert garbage_reviews == 0
    assert forged_reviews <= bound and answers.count(401) == forged_reviews and answers.count(429) >= ATTACK - bound
    assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) >= 1
    assert "too many new ServiceAccount tokens from 127.0.0.2" in throttled.json()["detail"]
    assert app.state.access.reviewer.reviews == proxy.calls


def test_refusals_cannot_push_an_accepted_token_out_of_the_cache(cluster, world, engine):  # noqa: F811
    start, proxy = engine
    served, _app = start(monkeypatched_entries=20, token_reviews_per_client_per_minute=10_000)
    with served as base:
        token = cluster.create_token(world["ns"], "frontend", world["audience"])
        assert get(base, token).status_code == 200 and proxy.calls == 1
        assert {get(base, plausible(world)).status_code for _ in range(60)} == {401}  # 3x the accepted cache
        before = proxy.calls
        assert get(base, token).status_code == 200
    assert proxy.calls == before, "the accepted token was reviewed again: refusals evicted it"


def test_a_throttling_api_server_leaves_cached_principals_served(cluster, world, engine):  # noqa: F811
    start, proxy = engine
    served, _app = start(token_review_cache_s=1.0)
    with served as base:
        known = cluster.create_token(world["ns"], "frontend", world["audience"])
        unknown = cluster.create_token(world["ns"], "frontend", world["audience"])
        assert get(base, known).status_code == 200
        time.sleep(1.5)  # its cache period (1 s) lapses: the next request would ask again
        proxy.throttle = True
        asked, started = proxy.calls, time.monotonic()
        first = get(base, known)
        statuses = [get(base, known).status_code for _ in range(20)] + [get(base, unknown).status_code for _ in range(20)]
        during, took = proxy.calls - asked, time.monotonic() - started
        refused = get(base, unknown)
        proxy.throttle = False
        deadline = time.monotonic() + 3 * RETRY_AFTER_S  # the engine asks again once the Retry-After passed
        while (after := get(base, unknown)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.5)
    print(f"\nAPI server throttling: the cached token {first.status_code}, {statuses[:20].count(200)}/20 again; "
          f"an unknown token 503 x {statuses[20:].count(503)}; {during} TokenReview(s) asked in {took:.1f} s")
    assert first.status_code == 200 and statuses[:20] == [200] * 20  # served past its cache period
    assert statuses[20:] == [503] * 20 and refused.status_code == 503 and refused.headers["retry-after"]
    # the 429 paused the reviews for its Retry-After: one review per pause, not one per request
    assert during <= 1 + int(took // RETRY_AFTER_S)
    assert after.status_code == 200
