"""HTTP sources end to end: a real engine, the real sync code and a real HTTP server that answers ETags,
Last-Modified and 304s; a bearer token from the Secret."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.sync import fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.sources.test_git_sync import LOOPBACK, embedded, engine, held  # noqa: F401 - the engine fixture

TOKEN = "web-token"


@pytest.fixture
def site():
    pages = {"/faq.html": b"<html><body><h1>FAQ</h1><p>Restart the pod to reload the model.</p></body></html>",
             "/notes": b"Plain notes served without a suffix."}
    hits: list[tuple[str, int]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._send(401, b"")
                return
            body = pages.get(self.path)
            if body is None:
                self._send(404, b"")
                return
            etag = '"' + hashlib.sha256(body).hexdigest()[:12] + '"'
            if self.headers.get("If-None-Match") == etag:
                self._send(304, b"", etag)
                return
            ctype = "text/html" if self.path.endswith(".html") else "text/plain; charset=utf-8"
            self._send(200, body, etag, ctype)

        def _send(self, status: int, body: bytes, etag: str | None = None, ctype: str = "text/plain") -> None:
            hits.append((self.path, status))
            self.send_response(status)
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", pages, hits
    server.shutdown()
    server.server_close()


def test_http_source_uses_etags_and_follows_changes(engine, site, tmp_path):  # noqa: F811
    base, pages, hits = site
    source = Source.model_validate({"name": "web", "index": "docs",
                                    "http": {"urls": [f"{base}/faq.html", f"{base}/notes"]}})
    state: dict = {"revision": None, "validators": None}

    def sync():
        client = EngineClient(engine)
        try:
            result = sync_source(source, client, lambda: fetch(
                source, cache=tmp_path, secret={"token": TOKEN}, previous_revision=state["revision"],
                previous_validators=state["validators"], policy=LOOPBACK), state["revision"])
        finally:
            client.close()
        if result.ok:
            state.update(revision=result.revision, validators=result.validators)
        return result

    first = sync()
    assert first.ok and first.documents == 2, first.message
    docs = held(engine)
    faq = docs[f"web:{base}/faq.html"]
    assert faq["text"] == "# FAQ\n\nRestart the pod to reload the model." and faq["metadata"]["url"] == f"{base}/faq.html"

    before, hits[:] = embedded(engine), []
    again = sync()
    assert again.ok and again.message == "up to date" and {s for _, s in hits} == {304}
    assert embedded(engine) == before

    pages["/notes"] = b"Plain notes, edited."
    changed = sync()
    assert changed.ok and changed.revision != first.revision and "1 updated" in changed.message, changed.message
    assert held(engine)[f"web:{base}/notes"]["text"] == "Plain notes, edited."

    source_bad = Source.model_validate({"name": "web", "index": "docs", "http": {"urls": [f"{base}/gone"]}})
    client = EngineClient(engine)
    result = sync_source(source_bad, client, lambda: fetch(source_bad, cache=tmp_path, secret={"token": TOKEN},
                                                           previous_revision=None, previous_validators=None,
                                                           policy=LOOPBACK))
    client.close()
    assert not result.ok and "HTTP 404" in result.message
    assert len(held(engine)) == 2  # nothing lost
    from ragengine_operator.sources.fetch import FetchError

    with pytest.raises(FetchError, match="refused the credentials"):
        fetch(source, cache=tmp_path, secret=None, previous_revision=None, previous_validators=None, policy=LOOPBACK)
