"""ServiceAccount principals with real tokens from the local API server (hack/cluster.sh up).

The engine verifies tokens by TokenReview with a token of its own ServiceAccount, bound to
``system:auth-delegator`` exactly as the operator binds it. Accepted: a token for the engine's audience of
an account with a rule. Refused (401): another audience, an account without a rule, an expired token
(the API server's verdict, and the engine's own before asking once ``exp`` has passed), a deleted account
(a fresh token, and one the engine had already reviewed and cached, once its cache entry lapses). An API
server that does not answer is a 503, never an open door. The route matrix's ServiceAccount column runs
here too.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.engine.test_access import ACCESS, ADMIN_KEY, INDEX, check_every_route
from tests.support.embedding import serve_engine
from tests.support.kubernetes import LocalCluster, local_cluster
from tests.support.server import refused_port

pytestmark = pytest.mark.cluster
CACHE_S = 1.0  # short, so a deleted account's cached token lapses within the test


@pytest.fixture(scope="module")
def cluster() -> LocalCluster:
    return local_cluster()


@pytest.fixture(scope="module")
def world(cluster, tmp_path_factory):
    """A namespace with the app accounts and the engine's own account (system:auth-delegator); cleaned up after."""
    ns = f"t-access-{uuid.uuid4().hex[:6]}"
    engine_sa = "ragengine-engine"
    cluster.kubectl("create", "namespace", ns)
    for sa in ("frontend", "norule", "doomed", "doomed-cached", engine_sa):
        cluster.kubectl("create", "serviceaccount", sa, "-n", ns)
    binding = f"{ns}-tokenreview"
    cluster.kubectl("create", "clusterrolebinding", binding, "--clusterrole=system:auth-delegator",
                    f"--serviceaccount={ns}:{engine_sa}")
    work = Path(tmp_path_factory.mktemp("sa"))
    own_token = work / "token"
    own_token.write_text(cluster.create_token(ns, engine_sa, "https://kubernetes.default.svc.cluster.local"))
    try:
        yield {"ns": ns, "audience": f"ragengine-{ns}", "own_token": own_token, "work": work}
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def access_rules(world: dict) -> dict:
    rule = {"indexes": ["team-a-*"], "role": "read", "groups": ["ops"]}
    return {**ACCESS, "audience": world["audience"], "serviceAccounts": [
        {"namespace": world["ns"], "name": name, **rule} for name in ("frontend", "doomed", "doomed-cached")]}


@pytest.fixture(scope="module")
def engine(cluster, world, embedder):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    work = world["work"]
    (work / "access.yaml").write_text(json.dumps(access_rules(world)))
    settings = EngineSettings(api_key=ADMIN_KEY, access_file=work / "access.yaml", data_dir=work / "data",
                              kubernetes_api_url=cluster.api_url, kubernetes_token_file=world["own_token"],
                              kubernetes_ca_file=cluster.ca_file, token_review_cache_s=CACHE_S)
    app = create_app(settings)
    with serve_engine(app, embedder) as base:
        spec = httpx.get(f"{base}/openapi.json", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
        yield base, app, spec


def status(base: str, token: str, path: str = "/indexes") -> int:
    return httpx.get(base + path, headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code


def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_engines_audience_is_accepted_and_the_account_is_a_principal(cluster, world, engine):
    base, app, _ = engine
    token = cluster.create_token(world["ns"], "frontend", world["audience"])
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for name in (INDEX, "team-b-x"):
        httpx.post(f"{base}/index", headers=admin, timeout=60,
                   json={"index_name": name, "documents": [{"text": f"{name} holds the pump runbook."}]})
    reviews = app.state.access.reviewer.reviews
    r = httpx.get(f"{base}/indexes", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json() == [INDEX]  # its rule's indexes only
    assert status(base, token) == 200
    assert app.state.access.reviewer.reviews == reviews + 1  # the second request used the cache
    metrics = httpx.get(f"{base}/metrics").text
    assert f'ragengine_access_decisions_total{{kind="serviceaccount",outcome="allowed",principal="{world["ns"]}/frontend"}}' \
        in metrics


def test_route_matrix_serviceaccount_column(cluster, world, engine):
    base, _app, spec = engine
    token = cluster.create_token(world["ns"], "frontend", world["audience"])
    check_every_route(base, spec, "serviceaccount (read on team-a-*)", f"Bearer {token}", 1, True)


def test_another_audience_and_an_account_without_a_rule_are_refused(cluster, world, engine):
    base, *_ = engine
    for token in (cluster.create_token(world["ns"], "frontend", "another-engine"),
                  cluster.create_token(world["ns"], "frontend", "https://kubernetes.default.svc.cluster.local"),
                  cluster.create_token(world["ns"], "norule", world["audience"])):
        assert status(base, token) == 401
    assert status(base, "eyJhbGciOiJSUzI1NiJ9.eyJ4IjoxfQ.c2ln") == 401  # JWT-shaped garbage


def test_an_expired_token_is_refused(cluster, world, engine):
    base, *_ = engine
    real = cluster.create_token(world["ns"], "frontend", world["audience"])
    now = int(time.time())
    # Expired past the API server's 60 s leeway: the API server refuses it (asked directly here; the engine
    # refuses it before asking, from its exp).
    expired = cluster.resign(real, iat=now - 900, nbf=now - 900, exp=now - 120)
    review = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": expired, "audiences": [world["audience"]]}})))
    assert review["status"].get("authenticated") is not True and "expired" in review["status"]["error"]
    assert status(base, expired) == 401
    # A token that expires while cached: accepted, then refused from its exp on (no wait on the cache).
    # (its exp is far enough ahead that a loaded machine still asks before it: the test waits on the refusal)
    fresh = int(time.time())
    soon = cluster.resign(real, iat=fresh - 60, nbf=fresh - 60, exp=fresh + 15)
    assert status(base, soon) == 200
    wait_for(lambda: status(base, soon) == 401, "the token to be refused after its exp", timeout_s=60)


def test_a_deleted_serviceaccount_is_refused(cluster, world, engine):
    base, *_ = engine
    fresh = cluster.create_token(world["ns"], "doomed", world["audience"])
    cached = cluster.create_token(world["ns"], "doomed-cached", world["audience"])
    assert status(base, cached) == 200  # reviewed and cached
    cluster.kubectl("delete", "serviceaccount", "doomed", "doomed-cached", "-n", world["ns"])
    assert status(base, fresh) == 401  # never seen: the API server refuses it
    wait_for(lambda: status(base, cached) == 401, f"the cached token to lapse ({CACHE_S} s)")


@pytest.fixture
def dead_port() -> Iterator[int]:
    with refused_port() as port:  # bound, never listening: refused for the whole test
        yield port


def test_an_unreachable_api_server_is_503_and_keys_keep_working(world, embedder, tmp_path, cluster, dead_port):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    (tmp_path / "access.yaml").write_text(json.dumps(access_rules(world)))
    settings = EngineSettings(api_key=ADMIN_KEY, access_file=tmp_path / "access.yaml", data_dir=tmp_path / "data",
                              kubernetes_api_url=f"https://127.0.0.1:{dead_port}",
                              kubernetes_token_file=world["own_token"], kubernetes_ca_file=cluster.ca_file)
    app = create_app(settings)
    token = cluster.create_token(world["ns"], "frontend", world["audience"])
    with serve_engine(app, embedder) as base:
        r = httpx.get(f"{base}/indexes", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 503 and r.headers["retry-after"] and "cannot be verified" in r.json()["detail"]
        assert status(base, ADMIN_KEY) == 200


@pytest.mark.parametrize(("change", "fragment"), [
    ({"audience": None}, "serviceAccounts need 'audience'"),
    ({"kubernetes_api_url": ""}, "serviceAccounts need the Kubernetes API"),
    ({"kubernetes_token_file": "missing"}, "need the engine's own ServiceAccount token"),
    ({"namespace": "Not_A_Namespace"}, "namespace"),
    # the engine's own token is issued for the API server: its audience is the API server's own (issue 41)
    ({"audience": "https://kubernetes.default.svc.cluster.local"}, "is the Kubernetes API server's own"),
])
def test_serviceaccount_rules_the_engine_cannot_use_stop_the_start(world, tmp_path, cluster, change, fragment,
                                                                  monkeypatch):
    from ragengine.access.source import AccessConfigError
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    rules = access_rules(world)
    if "audience" in change:
        rules["audience"] = change["audience"]
        if change["audience"] is None:
            del rules["audience"]
    if "namespace" in change:
        rules["serviceAccounts"][0]["namespace"] = change["namespace"]
    (tmp_path / "access.yaml").write_text(json.dumps(rules))
    values = {"kubernetes_api_url": cluster.api_url, "kubernetes_token_file": world["own_token"]}
    if "kubernetes_api_url" in change:
        values["kubernetes_api_url"] = None
    if "kubernetes_token_file" in change:
        values["kubernetes_token_file"] = tmp_path / "missing"
    with pytest.raises(AccessConfigError) as err:
        create_app(EngineSettings(access_file=tmp_path / "access.yaml", data_dir=tmp_path / "data", **values))
    assert fragment in str(err.value) and str(tmp_path / "access.yaml") in str(err.value)


def test_a_serviceaccounts_denials_are_audited_under_its_name(cluster, world, engine, caplog):
    base, *_ = engine
    token = cluster.create_token(world["ns"], "frontend", world["audience"])
    with caplog.at_level("WARNING", logger="ragengine.access"):
        r = httpx.delete(f"{base}/indexes/{INDEX}", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code in (403, 404)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "ragengine.access"]
    assert any(line["principal"] == f"serviceaccount:{world['ns']}/frontend" and line["route"] == "/indexes/{index_name}"
               for line in lines), lines
