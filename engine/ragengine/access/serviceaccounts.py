"""Kubernetes ServiceAccount tokens, verified by the API server (TokenReview) and cached briefly.

Why TokenReview and not the issuer's JWKS (OIDC discovery): the API server checks more than a signature.
It refuses a token whose ServiceAccount was deleted (or deleted and re-created: it compares the uid the
token was issued for), and a pod-bound projected token once its pod is gone, which a JWKS check cannot see
without reading those objects itself. It also follows the cluster's key rotation and issuer settings with
nothing to configure here. The price is one API call per new token per cache period, and the engine needs
``create tokenreviews`` (the ``system:auth-delegator`` ClusterRole) and its own token; the operator gives
it both when ``spec.access.serviceAccounts`` is set (docs/access.md).

Anyone can send a JWT-shaped bearer, so a review is the last resort, and bounded (issue 41: 300
unauthenticated requests made 300 TokenReviews):

- Refused without asking: a token whose (unverified) claims cannot be accepted anyway: expired, not issued
  for the engine's audience (``aud``), or naming (``sub``) a ServiceAccount without a rule. The claims are
  only ever read to refuse, never to accept.
- The rest of the unknown tokens are reviewed within a budget per client address and in total
  (review_budget.py); past it the caller gets 429 (``ReviewThrottled``).
- Two bounded caches (key: SHA-256 of audience and token, never the token), least recently used out first:
  accepted tokens, and refusals apart, so refusals can never push an accepted token out. An accepted token
  is fresh for ``cache_s`` (never past its own ``exp``); a refusal is kept for ``cache_s`` (a token never
  becomes valid later).
- When the API server cannot answer (unreachable, 5xx, 429: it then asked the engine to back off, which it
  does for ``Retry-After``, at most ``MAX_PAUSE_S``) or the budget is spent, an accepted token whose fresh
  period lapsed is still served for ``stale_s`` more (never past its ``exp``); only an unknown token gets 503
  (``ReviewUnavailable``). So a deleted ServiceAccount's token works at most ``cache_s`` after its deletion
  while the API server answers, and ``cache_s + stale_s`` while it does not.
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
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetools import TLRUCache

from ragengine.access.review_budget import ReviewBudget, ReviewThrottled

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("ragengine.access")
MAX_ENTRIES = 10_000  # accepted tokens cached
MAX_REFUSALS = 10_000  # refused tokens cached, apart
MAX_PAUSE_S = 30.0  # the longest the engine waits when the API server says 429 / 5xx
USER_PREFIX = "system:serviceaccount:"
REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
__all__ = ["ReviewThrottled", "ReviewUnavailable", "TokenReviewer", "accepted_account", "jwt_claims", "worth_asking"]


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


def _audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims.get("aud")
    return [aud] if isinstance(aud, str) else [a for a in aud if isinstance(a, str)] if isinstance(aud, list) else []


def worth_asking(claims: dict[str, Any], audience: str, accounts: Container[str], now: float) -> bool:
    """Whether a token with these (unverified) claims could be accepted at all: not expired, issued for
    ``audience``, of a ServiceAccount with a rule (``sub`` = system:serviceaccount:<namespace>:<name>, as the
    API server issues them). False: refuse without asking; True proves nothing."""
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp <= now:
        return False
    sub = claims.get("sub")
    if audience not in _audiences(claims) or not isinstance(sub, str) or not sub.startswith(USER_PREFIX):
        return False
    namespace, _, name = sub[len(USER_PREFIX):].partition(":")
    return f"{namespace}/{name}" in accounts


def own_audiences(token_file: Path) -> list[str]:
    """The audiences of the engine's own token (the API server's own: what a token for the API carries);
    empty when it cannot be read or is not a JWT."""
    try:
        claims = jwt_claims(token_file.read_text().strip())
    except OSError:
        return []
    return _audiences(claims) if claims else []


def in_cluster_api_url() -> str | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


@dataclass(frozen=True)
class _Accepted:
    who: str
    fresh_until: float
    stale_until: float


def _retry_after(resp: httpx.Response) -> float:
    try:
        return min(max(float(resp.headers.get("retry-after", "1")), 1.0), MAX_PAUSE_S)
    except ValueError:
        return 1.0


class TokenReviewer:
    """``review(token, audience, accounts, client)`` → ``"<namespace>/<name>"`` of the ServiceAccount, or None."""

    def __init__(self, api_url: str, token_file: Path, ca_file: Path | None, cache_s: float, *,
                 stale_s: float = 300.0, budget: ReviewBudget | None = None,
                 clock: Callable[[], float] = time.time, timeout_s: float = 5.0) -> None:
        self.api_url = api_url.rstrip("/")
        self.token_file = token_file
        self.cache_s, self.stale_s = cache_s, stale_s
        self.clock = clock
        self.budget = budget or ReviewBudget(60, 1200)
        import httpx  # here, not at import: an engine without ServiceAccount access never loads it at start-up

        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        self._http = httpx.AsyncClient(verify=verify, timeout=timeout_s)
        # TLRU: each entry's own time-to-use (its expiry), least recently used out first when full.
        self._accepted: TLRUCache = TLRUCache(maxsize=MAX_ENTRIES, ttu=lambda _k, v, now: v.stale_until, timer=clock)
        self._refused: TLRUCache = TLRUCache(maxsize=MAX_REFUSALS, ttu=lambda _k, v, now: v, timer=clock)
        self._pending: dict[str, asyncio.Future] = {}
        self._paused_until = 0.0  # the API server asked the engine to back off until then
        self.reviews = 0  # calls to the API server (tests read it to see the caches and the budget work)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _own_token(self) -> str:
        try:
            return self.token_file.read_text().strip()  # re-read: the kubelet rotates a projected token
        except OSError as exc:
            raise ReviewUnavailable(f"the engine's own token {self.token_file} cannot be read: {exc.strerror}") from None

    async def review(self, token: str, audience: str, accounts: Container[str], client: str | None = None) -> str | None:
        """The account, None when refused; ReviewUnavailable (503) or ReviewThrottled (429) when it cannot
        be told now. ``accounts``: the ``namespace/name`` of every ServiceAccount with a rule; ``client``: the
        caller's address, for the budget."""
        claims = jwt_claims(token)
        now = self.clock()
        if claims is None or not worth_asking(claims, audience, accounts, now):
            return None
        key = hashlib.sha256(f"{audience}\0{token}".encode()).hexdigest()
        known: _Accepted | None = self._accepted.get(key)
        if known is not None and now < known.fresh_until:
            return known.who
        if key in self._refused:
            return None
        pending = self._pending.get(key)
        if pending is not None:  # the same new token in concurrent requests: one review
            return await asyncio.shield(pending)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            who = await self._review_now(token, audience, known is None, client)
        except (ReviewUnavailable, ReviewThrottled) as exc:
            if known is not None:  # accepted before: served while it cannot be asked again (its stale period)
                log.info("serving a cached ServiceAccount token (%s) past its cache period: %s", known.who, exc)
                future.set_result(known.who)
                return known.who
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        else:
            future.set_result(who)
            exp = claims.get("exp")
            limit = float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else float("inf")
            if who is None:
                self._refused[key] = now + self.cache_s
            else:
                self._accepted[key] = _Accepted(who, min(now + self.cache_s, limit),
                                                min(now + self.cache_s + self.stale_s, limit))
            return who
        finally:
            self._pending.pop(key, None)

    async def _review_now(self, token: str, audience: str, unknown: bool, client: str | None) -> str | None:
        if self.clock() < self._paused_until:
            raise ReviewUnavailable(f"TokenReview at {self.api_url} paused: the API server asked the engine to wait")
        if unknown:
            self.budget.take(client)  # ReviewThrottled: nobody is asked
        return await self._ask(token, audience)

    async def _ask(self, token: str, audience: str) -> str | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [audience]}}
        self.reviews += 1
        import httpx

        try:
            resp = await self._http.post(self.api_url + REVIEW_PATH, json=body,
                                         headers={"Authorization": f"Bearer {self._own_token()}"})
        except httpx.HTTPError as exc:
            raise ReviewUnavailable(f"TokenReview at {self.api_url} failed: {exc.__class__.__name__}") from None
        if resp.status_code == 429 or resp.status_code >= 500:
            self._paused_until = self.clock() + _retry_after(resp)
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
