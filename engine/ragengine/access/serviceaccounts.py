"""Kubernetes ServiceAccount tokens, verified by the API server (TokenReview) and cached briefly.

Why TokenReview and not the issuer's JWKS (OIDC discovery): the API server checks more than a signature.
It refuses a token whose ServiceAccount was deleted (or deleted and re-created: it compares the uid the
token was issued for), and a pod-bound projected token once its pod is gone, which a JWKS check cannot see
without reading those objects itself. It also follows the cluster's key rotation and issuer settings with
nothing to configure here. The price is one API call per new token per cache period, and the engine needs
``create tokenreviews`` (the ``system:auth-delegator`` ClusterRole) and its own token; the operator gives
it both when ``spec.access.serviceAccounts`` is set (docs/access.md).

The cache (key: SHA-256 of audience and token, never the token) is bounded (``MAX_ENTRIES``, least
recently used out first). An accepted token stays accepted for at most ``cache_s`` and never past its own
``exp``; a refused one is refused for ``cache_s`` (a token never becomes valid later). The token's ``exp``
is read without verifying the signature, only ever to refuse sooner, never to accept. A review that fails
(API server unreachable, 5xx, our own token refused) is not cached: the caller answers 503.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from cachetools import TLRUCache

log = logging.getLogger("ragengine.access")
MAX_ENTRIES = 10_000
USER_PREFIX = "system:serviceaccount:"
REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


class ReviewUnavailable(Exception):
    """The API server could not say whether a token is valid (unreachable, an error, our token refused)."""


def _b64json(part: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of something shaped like a signed JWT (three base64url parts, a header naming ``alg``), read
    WITHOUT verification; None for anything else (an API key)."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts) or len(token) > 16_384:
        return None
    try:
        header, claims = _b64json(parts[0]), _b64json(parts[1])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if not isinstance(header, dict) or "alg" not in header or not isinstance(claims, dict):
        return None
    return claims


def in_cluster_api_url() -> str | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


class TokenReviewer:
    """``review(token, audience)`` → ``"<namespace>/<name>"`` of the ServiceAccount, or None (refused)."""

    def __init__(self, api_url: str, token_file: Path, ca_file: Path | None, cache_s: float, *,
                 clock: Callable[[], float] = time.time, timeout_s: float = 5.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.token_file = token_file
        self.cache_s = cache_s
        self.clock = clock
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        self._http = httpx.AsyncClient(verify=verify, timeout=timeout_s)
        # TLRU: each entry's own time-to-use (its expiry), least recently used out first when full.
        self._cache: TLRUCache = TLRUCache(maxsize=MAX_ENTRIES, ttu=lambda _k, v, now: v[1], timer=clock)
        self._pending: dict[str, asyncio.Future] = {}
        self.reviews = 0  # calls to the API server (tests read it to see the cache work)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _own_token(self) -> str:
        try:
            return self.token_file.read_text().strip()  # re-read: the kubelet rotates a projected token
        except OSError as exc:
            raise ReviewUnavailable(f"the engine's own token {self.token_file} cannot be read: {exc.strerror}") from None

    async def review(self, token: str, audience: str) -> str | None:
        claims = jwt_claims(token)
        if claims is None:
            return None
        now = self.clock()
        exp = claims.get("exp")
        if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp <= now:
            return None  # expired: refusing needs no trust in the unverified claim
        key = hashlib.sha256(f"{audience}\0{token}".encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            return cached[0]
        pending = self._pending.get(key)
        if pending is not None:  # the same new token in concurrent requests: one review
            return await asyncio.shield(pending)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            who = await self._ask(token, audience)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        else:
            future.set_result(who)
            until = now + self.cache_s
            if who is not None and isinstance(exp, (int, float)) and not isinstance(exp, bool):
                until = min(until, float(exp))
            self._cache[key] = (who, until)
            return who
        finally:
            self._pending.pop(key, None)

    async def _ask(self, token: str, audience: str) -> str | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [audience]}}
        self.reviews += 1
        try:
            resp = await self._http.post(self.api_url + REVIEW_PATH, json=body,
                                         headers={"Authorization": f"Bearer {self._own_token()}"})
        except httpx.HTTPError as exc:
            raise ReviewUnavailable(f"TokenReview at {self.api_url} failed: {exc.__class__.__name__}") from None
        if resp.status_code != 201 and resp.status_code != 200:
            raise ReviewUnavailable(f"TokenReview at {self.api_url} answered HTTP {resp.status_code}"
                                    + (" (does the engine's ServiceAccount have system:auth-delegator?)"
                                       if resp.status_code in (401, 403) else ""))
        try:
            status = resp.json().get("status") or {}
        except ValueError:
            raise ReviewUnavailable(f"TokenReview at {self.api_url} answered with invalid JSON") from None
        return accepted_account(status, audience)


def accepted_account(status: dict[str, Any], audience: str) -> str | None:
    """The ServiceAccount a TokenReview status accepts for ``audience``, as ``namespace/name``; None otherwise.
    Fail closed: not authenticated, our audience not confirmed, or a user that is not a ServiceAccount."""
    if status.get("authenticated") is not True or audience not in (status.get("audiences") or []):
        return None
    username = (status.get("user") or {}).get("username") or ""
    if not username.startswith(USER_PREFIX):
        return None
    namespace, _, name = username[len(USER_PREFIX):].partition(":")
    return f"{namespace}/{name}" if namespace and name else None
