"""Bearer-token authentication for the whole API when ``settings.api_key`` is set.

Probes (/health) and Prometheus (/metrics) stay open so kubelets and scrapers need no secret. The
token is compared in constant time. The 401 carries the same error shapes as every other error.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})


class BearerAuthMiddleware:
    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        message = "Missing or invalid API key: send 'Authorization: Bearer <key>'."
        if scope["path"].startswith("/v1/"):
            body = {"error": {"message": message, "type": "authentication_error", "code": 401, "param": None}}
        else:
            body = {"detail": message}
        payload = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]})
        await send({"type": "http.response.body", "body": payload})
