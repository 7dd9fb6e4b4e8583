"""An S3 source without a Secret takes the sync pod's workload identity (IRSA): the projected token traded at
STS (AssumeRoleWithWebIdentity) for the role's keys, which sign the requests to a real S3 server. STS itself
is AWS's service: a loopback server answering its documented XML stands in for it (the only double here)."""

from __future__ import annotations

import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.sync import fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.sources.test_git_sync import LOOPBACK, engine, held  # noqa: F401 - the engine fixture
from tests.support.s3_server import ACCESS_KEY, SECRET_KEY, s3_server

ROLE = "arn:aws:iam::111122223333:role/lake-reader"
ANSWER = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult><Credentials>
    <AccessKeyId>{key}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>{token}
    <Expiration>2030-01-01T00:00:00Z</Expiration>
  </Credentials></AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"""
REFUSED = """<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>
<Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>"""


@pytest.fixture
def sts():
    state = {"answer": ANSWER.format(key=ACCESS_KEY, secret=SECRET_KEY, token=""), "status": 200, "forms": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            form = dict(urllib.parse.parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
            state["forms"].append({**form, "authorization": self.headers.get("Authorization")})
            body = state["answer"].encode()
            self.send_response(state["status"])
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()
    server.server_close()


def test_a_source_without_a_secret_signs_with_the_roles_credentials(engine, sts, tmp_path, monkeypatch):  # noqa: F811
    endpoint, state = sts
    token_file = tmp_path / "token"
    token_file.write_text("eyJhbGciOi.projected-service-account-token.sig\n")
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", endpoint)
    with s3_server(tmp_path) as s3:
        s3.make_bucket("lake")
        s3.put("lake", "a.md", "# A\n\nRead with the role's keys.\n")
        source = Source.model_validate({"name": "lake", "index": "docs", "s3": {
            "endpoint": s3.base, "bucket": "lake", "serviceAccountName": "lake-reader"}})

        def sync():
            client = EngineClient(engine)
            try:
                return sync_source(source, client, lambda: fetch(source, cache=Path("unused"), secret=None,
                                                                 previous_revision=None, previous_validators=None,
                                                                 policy=LOOPBACK))
            finally:
                client.close()

        result = sync()
        assert result.ok and result.documents == 1, result.message
        assert set(held(engine)) == {"lake:a.md"}
        (form,) = state["forms"]
        assert form["Action"] == "AssumeRoleWithWebIdentity" and form["RoleArn"] == ROLE
        assert form["WebIdentityToken"] == "eyJhbGciOi.projected-service-account-token.sig"
        assert form["authorization"] is None  # the exchange is unsigned: the token is the credential

        # temporary credentials carry a session token: it is sent (this S3 server has no STS and refuses it)
        state["answer"] = ANSWER.format(key=ACCESS_KEY, secret=SECRET_KEY, token="<SessionToken>FwoGZXIv</SessionToken>")
        refused = sync()
        assert not refused.ok and "refused the credentials (InvalidToken" in refused.message, refused.message

        state["answer"], state["status"] = REFUSED, 403
        denied = sync()
        assert not denied.ok and f"STS refused the web identity for role {ROLE} (AccessDenied" in denied.message, \
            denied.message


@pytest.mark.parametrize(("settings", "why"), [
    ({"sync_mode": "subprocess"}, "needs the operator's sync mode job"),
    ({"sync_mode": "job", "allow_service_account_name": False}, "refused by the operator's policy"),
])
def test_a_workload_identity_the_operator_cannot_give_is_refused_before_any_worker(settings, why):
    from types import SimpleNamespace

    from ragengine_operator.settings import OperatorSettings
    from ragengine_operator.sources.sync import SyncResult
    from ragengine_operator.syncer.runner import SourceSyncer, Target

    source = Source.model_validate({"name": "lake", "s3": {"bucket": "lake", "serviceAccountName": "lake-reader"}})
    syncer = SourceSyncer(SimpleNamespace(settings=OperatorSettings(**settings)))  # type: ignore[arg-type]
    refused = syncer.prepare(Target("ns", "rag", "uid", (source,), (), True, None), source, None)
    assert isinstance(refused, SyncResult) and not refused.ok and why in refused.message, refused
    allowed = SourceSyncer(SimpleNamespace(settings=OperatorSettings(sync_mode="job")))  # type: ignore[arg-type]
    prepared = allowed.prepare(Target("ns", "rag", "uid", (source,), (), True, None), source, None)
    assert not isinstance(prepared, SyncResult) and prepared.service_account == "lake-reader"


def test_keys_and_a_workload_identity_together_are_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="not both"):
        Source.model_validate({"name": "lake", "s3": {"bucket": "lake", "secretRef": {"name": "k"},
                                                      "serviceAccountName": "lake-reader"}})
