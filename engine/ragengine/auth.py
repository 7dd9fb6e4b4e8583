"""Bearer-token authentication for the whole API when ``settings.api_key`` is set.

Probes (/health, /ready) and Prometheus (/metrics) stay open so kubelets and scrapers need no secret;
they accept no writes, and without the key they show status only: no index names or counts, no
dependency URLs or error texts (``key_given`` tells those routes whether to add them). Everything
else (/openapi.json and /docs too) needs the key. The token is compared in constant time. The 401
carries the same error shapes as every other error.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from ragengine.errors import error_body_for

OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})


def key_given(authorization: str | bytes | None, api_key: str | None) -> bool:
    """True when no key is configured, or ``authorization`` is ``Bearer <api_key>``."""
    if not api_key:
        return True
    given = authorization.encode() if isinstance(authorization, str) else (authorization or b"")
    return hmac.compare_digest(given, f"Bearer {api_key}".encode())


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
        payload = json.dumps(error_body_for(scope["path"], 401, message, "authentication_error")).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]})
        await send({"type": "http.response.body", "body": payload})
