"""The push receiver over real HTTP (aiohttp's test server on loopback): what it accepts, what it refuses and
counts, and that one namespace's flood leaves another's pushes through. The sources and the sync request are
plain functions here; tests/operator/integration/test_s3_sources.py runs it as every replica does (runtime's
side server) with the operator on the control plane. Here too: the side server that runtime.py starts in
every replica, before and without any lease or kopf, serves it on its own port."""

from __future__ import annotations

import json
import time

import httpx
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from ragengine_operator import runtime
from ragengine_operator.metrics import WEBHOOK_REQUESTS
from ragengine_operator.receiver.server import Hooked, LookupUnavailable, Receiver, Throttle
from ragengine_operator.receiver.verify import TOLERANCE_S, sign_github, sign_standard
from ragengine_operator.settings import OperatorSettings
from ragengine_operator.spec.sources import Source
from tests.support.server import port_for_external_server, refused_port

SECRET = "push-secret"
PUSH = json.dumps({"ref": "refs/heads/main", "after": "0" * 40}).encode()


def _source(kind: str, **spec) -> Source:
    spec = spec or {"git": {"url": "https://git.example/docs.git", "ref": "main"}}
    return Source.model_validate({"name": "kb", "webhook": {"type": kind, "secretRef": {"name": "hook"}}, **spec})


class Hooks:
    def __init__(self, sources: dict[tuple[str, str, str], Source]) -> None:
        self.sources, self.requested = sources, []
        self.lookup_fails: Exception | None = None  # the API server, as the receiver's calls would see it
        self.request_fails: Exception | None = None

    def lookup(self, ns: str, name: str, source: str) -> Hooked | None:
        if self.lookup_fails:
            raise self.lookup_fails
        found = self.sources.get((ns, name, source))
        return Hooked(found, SECRET) if found else None

    def request_sync(self, ns: str, name: str, source: str, token: str) -> None:
        if self.request_fails:
            raise self.request_fails
        self.requested.append((ns, name, source, token))


@pytest.fixture
async def receiver():
    hooks = Hooks({("team-a", "rag", "kb"): _source("github"), ("team-b", "rag", "kb"): _source("github"),
                   ("team-a", "rag", "lab"): _source("gitlab"),
                   ("team-a", "rag", "lake"): _source("generic", s3={"bucket": "lake", "prefix": "kb/"})})
    app = Receiver(hooks.lookup, hooks.request_sync, max_body=64 * 1024, throttle=Throttle(rate=1.0, burst=5)).app()
    async with TestClient(TestServer(app)) as client:
        yield client, hooks


def counted(kind: str, outcome: str) -> float:
    return WEBHOOK_REQUESTS.labels(kind, outcome)._value.get()


def github(body: bytes = PUSH, delivery: str = "d-1", event: str = "push", secret: str = SECRET) -> dict:
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign_github(secret, body),
            "Content-Type": "application/json"}


def standard(body: bytes, delivery: str, at: float | None = None, secret: str = SECRET, **extra: str) -> dict:
    stamp = int(time.time() if at is None else at)
    return {"webhook-id": delivery, "webhook-timestamp": str(stamp),
            "webhook-signature": sign_standard(secret, delivery, stamp, body), **extra}


async def test_a_signed_github_push_to_the_branch_requests_a_sync_once(receiver):
    client, hooks = receiver
    before = counted("github", "accepted")
    resp = await client.post("/hook/team-a/rag/kb", data=PUSH, headers=github())
    assert resp.status == 202 and (await resp.json())["synced"], await resp.text()
    assert hooks.requested == [("team-a", "rag", "kb", "d-1")]
    assert counted("github", "accepted") == before + 1
    replay = await client.post("/hook/team-a/rag/kb", data=PUSH, headers=github())
    assert replay.status == 409 and "received before" in await replay.text()
    assert len(hooks.requested) == 1 and counted("github", "replay") >= 1


@pytest.mark.parametrize(("headers", "why"), [
    ({"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-2"}, "no X-Hub-Signature-256"),
    (github(delivery="d-3", secret="not-the-secret"), "does not match"),
    (github(body=b'{"ref": "refs/heads/other"}', delivery="d-4"), "does not match"),  # signed another body
])
async def test_unsigned_or_badly_signed_pushes_are_refused_and_counted(receiver, headers, why):
    client, hooks = receiver
    before = counted("github", "bad_signature")
    resp = await client.post("/hook/team-a/rag/kb", data=PUSH, headers=headers)
    assert resp.status == 401 and why in await resp.text()
    assert hooks.requested == [] and counted("github", "bad_signature") == before + 1


async def test_pushes_elsewhere_and_pings_sync_nothing(receiver):
    client, hooks = receiver
    other = json.dumps({"ref": "refs/heads/feature"}).encode()
    resp = await client.post("/hook/team-a/rag/kb", data=other, headers=github(other, "d-5"))
    assert resp.status == 200 and "the source follows main" in await resp.text()
    ping = await client.post("/hook/team-a/rag/kb", data=b"{}", headers=github(b"{}", "d-6", event="ping"))
    assert ping.status == 200 and "ping" in await ping.text()
    assert hooks.requested == []


async def test_gitlab_signing_tokens_and_their_timestamps(receiver):
    client, hooks = receiver
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    fresh = await client.post("/hook/team-a/rag/lab", data=body, headers=standard(body, "g-1", **{"X-Gitlab-Event": "Push Hook"}))
    assert fresh.status == 202, await fresh.text()
    stale = await client.post("/hook/team-a/rag/lab", data=body, headers=standard(
        body, "g-2", at=time.time() - TOLERANCE_S - 60, **{"X-Gitlab-Event": "Push Hook"}))
    assert stale.status == 401 and "more than 300 s" in await stale.text()
    token_only = await client.post("/hook/team-a/rag/lab", data=body, headers={"X-Gitlab-Token": SECRET,
                                                                               "X-Gitlab-Event": "Push Hook"})
    assert token_only.status == 401 and "signing token" in await token_only.text()
    assert [r[3] for r in hooks.requested] == ["g-1"]


async def test_an_s3_event_notification_for_the_sources_keys_syncs_it(receiver):
    client, hooks = receiver

    def event(bucket: str, key: str) -> bytes:
        return json.dumps({"Records": [{"eventName": "s3:ObjectCreated:Put",
                                        "s3": {"bucket": {"name": bucket}, "object": {"key": key}}}]}).encode()

    mine = event("lake", "kb/hr/pay.md")
    resp = await client.post("/hook/team-a/rag/lake", data=mine, headers=standard(mine, "s-1"))
    assert resp.status == 202, await resp.text()
    other = event("lake", "elsewhere/x.md")
    resp = await client.post("/hook/team-a/rag/lake", data=other, headers=standard(other, "s-2"))
    assert resp.status == 200 and "under prefix 'kb/'" in await resp.text()
    assert [r[2] for r in hooks.requested] == ["lake"]


async def test_unknown_sources_and_large_bodies_are_refused(receiver):
    client, hooks = receiver
    resp = await client.post("/hook/team-a/rag/nope", data=PUSH, headers=github(delivery="u-1"))
    assert resp.status == 404
    big = b"x" * (64 * 1024 + 1)
    resp = await client.post("/hook/team-a/rag/kb", data=big, headers=github(big, "u-2"))
    assert resp.status == 413 and hooks.requested == []


async def test_one_namespaces_flood_does_not_starve_another(receiver):
    client, hooks = receiver
    statuses = []
    for i in range(12):  # team-a floods: past its burst of 5 (1 a second) it gets 429s
        resp = await client.post("/hook/team-a/rag/kb", data=PUSH, headers=github(delivery=f"f-{i}"))
        statuses.append(resp.status)
    assert statuses.count(429) >= 6 and statuses[0] == 202, statuses
    resp = await client.post("/hook/team-b/rag/kb", data=PUSH, headers=github(delivery="b-1"))
    assert resp.status == 202, await resp.text()  # team-b's push goes through at once
    assert ("team-b", "rag", "kb", "b-1") in hooks.requested


async def test_a_push_the_api_server_cannot_take_now_is_503_and_its_retry_is_welcome(receiver):
    client, hooks = receiver
    hooks.lookup_fails = LookupUnavailable("the API server did not answer (MaxRetryError)")
    before = counted("unknown", "unavailable")
    resp = await client.post("/hook/team-a/rag/kb", data=PUSH, headers=github(delivery="r-1"))
    assert resp.status == 503 and "retry" in await resp.text() and counted("unknown", "unavailable") == before + 1
    hooks.lookup_fails, hooks.request_fails = None, ConnectionRefusedError("the API server")
    resp = await client.post("/hook/team-a/rag/kb", data=PUSH, headers=github(delivery="r-2"))
    assert resp.status == 503 and hooks.requested == []
    hooks.request_fails = None
    again = await client.post("/hook/team-a/rag/kb", data=PUSH, headers=github(delivery="r-2"))  # GitHub's redelivery
    assert again.status == 202, await again.text()  # not a replay: the first was never acted on
    assert hooks.requested == [("team-a", "rag", "kb", "r-2")]


def test_every_replica_serves_the_receiver_from_its_side_server_without_a_lease(tmp_path, monkeypatch):
    """runtime.run starts this server before leader election, in every replica; kopf (and its startup handler,
    where the receiver used to start) runs only in the leader. Nothing of kopf runs here: the receiver answers
    on its own port over plain HTTP beside the probes, with its own Kubernetes client (an API server that
    refuses connections here: a 503, never a 500), and stops with the side server."""
    with refused_port() as api_port:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{api_port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        settings = OperatorSettings(receiver_port=port_for_external_server(), liveness_port=port_for_external_server(),
                                    webhook_port=0, leader_election=True)
        server = runtime.side_server(settings, lambda: None)
        server.start()
        try:
            hook = f"http://127.0.0.1:{settings.receiver_port}/hook/team-a/rag/kb"
            resp = httpx.post(hook, content=PUSH, headers=github(delivery="s-1"), timeout=30)
            assert resp.status_code == 503 and "could not be looked up" in resp.text, resp.text
            assert httpx.get(f"http://127.0.0.1:{settings.liveness_port}/healthz").text == "ok\n"
            assert httpx.get(f"http://127.0.0.1:{settings.receiver_port}/healthz").status_code == 404  # its own app
        finally:
            server.stop()
        with pytest.raises(httpx.ConnectError):
            httpx.post(hook, content=PUSH, headers=github(delivery="s-2"))
