"""The push receiver's HTTP app (aiohttp): ``POST /hook/<namespace>/<name>/<source>``.

Each request, in this order (each refusal is counted in ``ragengine_operator_webhook_requests_total`` by
its outcome, and changes nothing):

1. the namespace's share: at most ``burst`` requests at once and ``rate`` a second per namespace (429):
   one tenant's flood costs that tenant, not the others, and bounds the API reads below;
2. the body, at most ``max_body`` bytes (413);
3. the source: the RAGEngine's ``spec.sources[]`` entry and the ``token`` of its ``webhook.secretRef``,
   read through the API and kept for a few seconds (404 alike for a missing RAGEngine, source or webhook;
   503 when the API server does not answer, so the sender retries);
4. the signature (verify.py: 401), then the delivery id never seen before (409: a replay);
5. what it asks (events.py): a push to another branch, a ping, an S3 event for other keys is answered 200
   and syncs nothing; otherwise the source's sync is requested (202; 503 when the request could not be
   written, and the delivery is forgotten, so the sender's retry of it is not a replay).

A request is *requested*, not run, here: ``request_sync`` writes ``sync.ragengine.io/<source>: <delivery>``
on the RAGEngine, and the source syncer of the replica that leads picks it up from its watch (it wakes at
once). So the receiver runs in every replica's side server (conversion/server.py, started by runtime.py
before leader election), any replica may take a push, the leader acts, and a push that arrives while the
same source syncs starts exactly one more sync after it. The same annotation, or ``ragengine.io/sync-now``
for every source, is how a person asks: ``kubectl annotate rag X ...``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from ragengine_operator.metrics import WEBHOOK_REQUESTS
from ragengine_operator.receiver.events import wants_sync
from ragengine_operator.receiver.verify import Replays, verify
from ragengine_operator.spec.sources import Source

log = logging.getLogger(__name__)
MAX_BODY = 10 * 1024 * 1024  # GitHub's push payloads are capped at 25 MB; 10 MiB holds any but the largest
RATE, BURST = 5.0, 20  # requests per second and at once, per namespace


class LookupUnavailable(Exception):
    """The source could not be looked up now (the API server did not answer): the sender should retry."""


@dataclass(frozen=True)
class Hooked:
    """A source that takes pushes, and the key its pushes are signed with."""

    source: Source
    secret: str


@dataclass
class Bucket:
    tokens: float
    at: float


@dataclass
class Throttle:
    """A token bucket per namespace."""

    rate: float = RATE
    burst: int = BURST
    buckets: dict[str, Bucket] = field(default_factory=dict)

    def take(self, namespace: str, now: float) -> bool:
        b = self.buckets.setdefault(namespace, Bucket(float(self.burst), now))
        b.tokens, b.at = min(float(self.burst), b.tokens + (now - b.at) * self.rate), now
        if b.tokens < 1:
            return False
        b.tokens -= 1
        return True


Lookup = Callable[[str, str, str], Hooked | None]
RequestSync = Callable[[str, str, str, str], None]


class Receiver:
    def __init__(self, lookup: Lookup, request_sync: RequestSync, *, max_body: int = MAX_BODY,
                 throttle: Throttle | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.lookup, self.request_sync, self.max_body = lookup, request_sync, max_body
        self.throttle = throttle or Throttle()
        self.replays = Replays()
        self.clock, self.monotonic = clock, monotonic

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_post("/hook/{namespace}/{name}/{source}", self.hook)
        return app

    def _answer(self, kind: str, outcome: str, status: int, message: str, synced: bool = False) -> web.Response:
        WEBHOOK_REQUESTS.labels(kind, outcome).inc()
        return web.json_response({"synced": synced, "message": message}, status=status)

    async def hook(self, request: web.Request) -> web.Response:
        ns, name, src = (request.match_info[k] for k in ("namespace", "name", "source"))
        if not self.throttle.take(ns, self.monotonic()):
            return self._answer("unknown", "throttled", 429, f"too many webhook requests for namespace {ns}; "
                                f"at most {self.throttle.rate:g} a second")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._answer("unknown", "too_large", 413, f"the body is over {self.max_body} bytes")
        try:
            hooked = await asyncio.to_thread(self.lookup, ns, name, src)
        except LookupUnavailable as exc:
            return self._answer("unknown", "unavailable", 503, f"source {src} of RAGEngine {ns}/{name} could not be "
                                f"looked up: {exc}; retry")
        if hooked is None or hooked.source.webhook is None:
            return self._answer("unknown", "unknown", 404, f"no source {src} with a webhook in RAGEngine {ns}/{name}")
        kind = hooked.source.webhook.type
        headers = {k.lower(): v for k, v in request.headers.items()}
        verdict = verify(kind, hooked.secret, headers, body, self.clock())
        if not verdict.ok:
            return self._answer(kind, verdict.outcome, 401, verdict.reason)
        if not self.replays.first_time(f"{ns}/{name}/{src}", verdict.delivery):
            return self._answer(kind, "replay", 409, f"delivery {verdict.delivery[:100]} was received before: "
                                "a replay is not synced again")
        wanted, why = wants_sync(hooked.source, kind, headers, body)
        if not wanted:
            return self._answer(kind, "ignored", 200, f"not synced: {why}")
        try:
            await asyncio.to_thread(self.request_sync, ns, name, src, verdict.delivery[:128])
        except Exception as exc:  # the API server: unreachable, or the RAGEngine gone meanwhile
            self.replays.forget(f"{ns}/{name}/{src}", verdict.delivery)
            log.warning("sync of source %s of %s/%s not requested: %s", src, ns, name, exc)
            return self._answer(kind, "unavailable", 503, f"the sync could not be requested ({type(exc).__name__}); "
                                "retry")
        log.info("sync of source %s of %s/%s requested by a %s webhook (%s)", src, ns, name, kind, why)
        return self._answer(kind, "accepted", 202, f"sync requested: {why}", synced=True)
