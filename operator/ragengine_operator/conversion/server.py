"""The operator's side server, run by EVERY replica (leader or not) in a thread of its own:

- ``POST /convert`` over TLS: the CRD's conversion webhook (ConversionReview v1, convert.py). Every replica
  answers, so conversions go on through a leader hand-over and an operator roll;
- ``GET /healthz`` (liveness) and ``GET /readyz`` (readiness: serving conversions) over plain HTTP;
- other plain-HTTP apps on ports of their own (``apps``): the push receiver (receiver/start.py), which only
  writes an annotation the leader's source syncer acts on, so any replica may take a push.

The TLS context is loaded once and its certificate replaced in place (``reload``): connections made after a
renewal present the new certificate, open ones finish on the old.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from .. import metrics
from .convert import ConversionError, convert
from .webhook_config import PATH

log = logging.getLogger(__name__)
MAX_REVIEW_BYTES = 64 * 1024 * 1024  # one LIST's worth of objects comes in one review


def review_response(review: dict[str, Any]) -> dict[str, Any]:
    """The ConversionReview answer: every object converted, or a Failure that names what went wrong (the API
    server then refuses the request with that message, and nothing is half-converted)."""
    request = review.get("request") or {}
    uid = request.get("uid", "")
    try:
        desired = request["desiredAPIVersion"]
        objects = request["objects"]
        if not isinstance(objects, list):
            raise ConversionError("request.objects must be a list")
        converted = [convert(o, desired) for o in objects]
        result: dict[str, Any] = {"status": "Success"}
    except (ConversionError, KeyError, TypeError, AttributeError) as exc:
        what = exc.args[0] if isinstance(exc, ConversionError) else f"malformed ConversionReview ({type(exc).__name__}: {exc})"
        log.warning("conversion refused: %s", what)
        converted, result = [], {"status": "Failure", "message": str(what)}
    return {"apiVersion": review.get("apiVersion", "apiextensions.k8s.io/v1"), "kind": "ConversionReview",
            "response": {"uid": uid, "convertedObjects": converted, "result": result}}


class SideServer:
    """The webhook (TLS), the probes and ``apps`` (plain HTTP, ``{port: app}``) on their own event loop thread."""

    def __init__(self, webhook_port: int, health_port: int, healthy: Callable[[], str | None],
                 host: str = "0.0.0.0", apps: Mapping[int, web.Application] | None = None) -> None:
        self.webhook_port, self.health_port, self.host = webhook_port, health_port, host
        self.healthy = healthy  # None when the process is healthy, else why not (liveness)
        self.apps = dict(apps or {})
        self._failed: BaseException | None = None
        self.tls: ssl.SSLContext | None = None
        self._cert_dir = Path(tempfile.mkdtemp(prefix="ragengine-webhook-"))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.served = 0
        self.serving = False  # the webhook's port is bound (readiness)

    # -- TLS ---------------------------------------------------------------------------------------------
    def reload(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Serve this certificate from now on (the key file is private to this process)."""
        cert, key = self._cert_dir / "tls.crt", self._cert_dir / "tls.key"
        key.touch(mode=0o600)
        cert.write_bytes(cert_pem)
        key.write_bytes(key_pem)
        if self.tls is None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(cert, key)
            self.tls = context
        else:
            self.tls.load_cert_chain(cert, key)

    # -- handlers ------------------------------------------------------------------------------------------
    async def _convert(self, request: web.Request) -> web.Response:
        try:
            review = await request.json()
        except ValueError:
            return web.json_response({"message": "the body is not a ConversionReview (JSON)"}, status=400)
        if not isinstance(review, dict):
            return web.json_response({"message": "the body is not a ConversionReview (an object)"}, status=400)
        started = time.perf_counter()
        answer = review_response(review)
        self.served += 1
        metrics.CONVERSIONS.labels(result=answer["response"]["result"]["status"]).inc()
        log.debug("converted %d object(s) in %.1f ms", len(answer["response"]["convertedObjects"]),
                  (time.perf_counter() - started) * 1000)
        return web.json_response(answer)

    async def _healthz(self, _: web.Request) -> web.Response:
        why = self.healthy()
        return web.Response(text="ok\n") if why is None else web.Response(text=why + "\n", status=500)

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.webhook_port and not self.serving:
            return web.Response(text="the conversion webhook is not serving yet (no certificate)\n", status=503)
        return web.Response(text="ok\n")

    # -- life -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="side-server", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("the webhook and probe server did not start")
        if self._failed is not None:  # a port taken, say: the process stops with the reason
            raise RuntimeError(f"the side server did not start: {self._failed}") from self._failed

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception as exc:
            self._failed = exc
            self._started.set()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        runners = []
        if self.health_port:  # first: liveness must answer while the certificate is still being made
            health = web.Application()
            health.router.add_get("/healthz", self._healthz)
            health.router.add_get("/readyz", self._readyz)
            runners.append(await self._site(health, self.health_port, None))
        for port, app in self.apps.items():  # no certificate needed: they serve at once
            runners.append(await self._site(app, port, None))
        if not self.webhook_port or self.tls is None:
            self._started.set()  # the probes answer; the webhook follows once its certificate is there
        if self.webhook_port:
            while self.tls is None and not self._stop.is_set():  # the first certificate (reload) comes from main
                await asyncio.sleep(0.2)
            if self.tls is not None:
                app = web.Application(client_max_size=MAX_REVIEW_BYTES)
                app.router.add_post(PATH, self._convert)
                runners.append(await self._site(app, self.webhook_port, self.tls))
                self.serving = True
                log.info("conversion webhook on https://%s:%d%s", self.host, self.webhook_port, PATH)
            self._started.set()
        await self._stop.wait()
        for runner in runners:
            await runner.cleanup()

    async def _site(self, app: web.Application, port: int, tls: ssl.SSLContext | None) -> web.AppRunner:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.host, port, ssl_context=tls).start()
        return runner
