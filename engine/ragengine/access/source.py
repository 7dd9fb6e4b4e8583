"""The access rules in force: built from settings at start, re-read when the access file changes.

A bad file at start-up stops the engine with a message naming the file and the fault. A bad file later
(a typo in a ConfigMap or Secret edit) is refused: the previous rules keep serving, nothing opens up, and
the error is logged and counted (``ragengine_access_reloads_total{outcome="error"}``). The file is checked
at most once a second, by its inode, size and modification time (a Kubernetes Secret or ConfigMap volume
swaps a symlink, which changes the inode), so an edit applies within a second or so of reaching the pod.

ServiceAccount rules need the Kubernetes API (TokenReview, ``access.serviceaccounts``): a file with
``serviceAccounts`` on an engine that cannot reach it (no API URL, no token of its own) is refused like
any other bad file. Index patterns that match no existing index are warned about (a typo would otherwise
show only as a 404), at start-up once the indexes are loaded and at every reload.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hmac
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragengine.access.review_budget import ReviewBudget
from ragengine.access.rules import ANONYMOUS, AccessRules, Principal, Role, key_digest
from ragengine.access.serviceaccounts import TokenReviewer, in_cluster_api_url, jwt_claims, own_audiences
from ragengine.filestamp import file_stamp
from ragengine.metrics import ACCESS_RELOADS
from ragengine.validation import validation_message

log = logging.getLogger("ragengine.access")
CHECK_EVERY_S = 1.0
API_KEY_PRINCIPAL = "api-key"  # the principal RAGENGINE_API_KEY authenticates


class AccessConfigError(ValueError):
    """The access file cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class Keyring:
    """Key digests and the principal each authenticates. ``enabled`` False: no credentials configured, every
    caller is the anonymous admin (a local engine, as before access control)."""

    entries: tuple[tuple[bytes, Principal], ...]
    enabled: bool
    accounts: dict[str, Principal] = field(default_factory=dict)  # "namespace/name" -> principal
    audience: str | None = None
    rules: AccessRules | None = None

    @property
    def principals(self) -> list[Principal]:
        return [p for _, p in self.entries] + list(self.accounts.values())

    def authenticate(self, token: str) -> Principal | None:
        digest = key_digest(token)
        found = None
        for candidate, principal in self.entries:  # no early exit: time does not tell which key matched
            if hmac.compare_digest(candidate, digest):
                found = principal
        return found


def build_keyring(api_key: str | None, rules: AccessRules | None) -> Keyring:
    entries: list[tuple[bytes, Principal]] = []
    if api_key:
        entries.append((key_digest(api_key), Principal(API_KEY_PRINCIPAL, "key", Role.admin)))
    default = rules.default_limits if rules else None
    for rule in rules.keys if rules else ():
        if rule.name == API_KEY_PRINCIPAL and api_key:
            raise AccessConfigError(f"the key name {API_KEY_PRINCIPAL!r} is taken by RAGENGINE_API_KEY")
        entries.append((rule.digest(), Principal(rule.name, "key", rule.role, tuple(rule.indexes),
                                                 frozenset(rule.groups), rule.limits or default)))
    if len({d for d, _ in entries}) != len(entries):
        raise AccessConfigError("a key in the access file is the same as RAGENGINE_API_KEY")
    accounts = {a.principal_name: Principal(a.principal_name, "serviceaccount", a.role, tuple(a.indexes),
                                            frozenset(a.groups), a.limits or default)
                for a in (rules.service_accounts if rules else ())}
    return Keyring(tuple(entries), enabled=bool(api_key) or rules is not None, accounts=accounts,
                   audience=rules.audience if rules else None, rules=rules)


def unmatched_patterns(principals: list[Principal], names: list[str]) -> list[str]:
    """Warnings for index patterns that match none of ``names`` (``*`` alone is never warned about)."""
    out = []
    for p in principals:
        for glob in p.indexes:
            if glob != "*" and not any(fnmatch.fnmatchcase(n, glob) for n in names):
                out.append(f"{p.kind} {p.name!r}: index pattern {glob!r} matches no index (yet)")
    return out


def parse_rules(text: str, origin: str) -> AccessRules:
    import yaml  # here: an engine without an access file never parses YAML

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AccessConfigError(f"{origin}: not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AccessConfigError(f"{origin}: the top level must be a mapping (keys: ...)")
    try:
        return AccessRules.model_validate(data)
    except ValidationError as exc:
        raise AccessConfigError(f"{origin}: {validation_message(exc)}") from None


@dataclass(frozen=True)
class KubernetesAPI:
    """How the engine reaches the API server for TokenReview (settings kubernetes_*; in a pod, the defaults)."""

    url: str | None
    token_file: Path
    ca_file: Path | None
    cache_s: float = 30.0
    stale_s: float = 300.0
    per_client_per_minute: int = 60
    per_minute: int = 1200

    @classmethod
    def from_settings(cls, settings: Any) -> KubernetesAPI:
        return cls(settings.kubernetes_api_url or in_cluster_api_url(), settings.kubernetes_token_file,
                   settings.kubernetes_ca_file, settings.token_review_cache_s, settings.token_review_stale_s,
                   settings.token_reviews_per_client_per_minute, settings.token_reviews_per_minute)


class AccessSource:
    def __init__(self, api_key: str | None, access_file: Path | None,
                 clock: Callable[[], float] = time.monotonic, kubernetes: KubernetesAPI | None = None) -> None:
        self.api_key = api_key
        self.path = access_file
        self.clock = clock
        self.kubernetes = kubernetes
        self.reviewer: TokenReviewer | None = None
        self.index_names: Callable[[], list[str]] | None = None  # set once the indexes are loaded
        self.last_error: str | None = None
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._checked = clock()
        self._stamp = file_stamp(access_file) if access_file else None
        self._keyring = self._load()  # raises AccessConfigError: the engine does not start

    @property
    def enabled(self) -> bool:
        return self._keyring.enabled

    def _load(self) -> Keyring:
        rules = None
        if self.path is not None:
            try:
                text = self.path.read_text()
            except OSError as exc:
                raise AccessConfigError(f"access file {self.path}: cannot be read: {exc.strerror}") from None
            rules = parse_rules(text, f"access file {self.path}")
        keyring = build_keyring(self.api_key, rules)
        if keyring.accounts:
            self._need_kubernetes(keyring.audience)
        return keyring

    def _need_kubernetes(self, audience: str | None) -> None:
        """ServiceAccount rules are refused (start-up error, or the previous rules kept) when the engine
        cannot ask the API server about tokens: accepting the file would make every such rule dead; and when
        their audience is the API server's own (read from the engine's own token, which is issued for it):
        callers would hand the engine tokens that open the API."""
        kube = self.kubernetes
        where = f"access file {self.path}"
        if kube is None or not kube.url:
            raise AccessConfigError(f"{where}: serviceAccounts need the Kubernetes API for TokenReview; set "
                                    "RAGENGINE_KUBERNETES_API_URL or run in a cluster")
        if not kube.token_file.is_file():
            raise AccessConfigError(f"{where}: serviceAccounts need the engine's own ServiceAccount token at "
                                    f"{kube.token_file} (automountServiceAccountToken, and system:auth-delegator "
                                    "for TokenReview; the operator sets both up from spec.access)")
        if audience is not None and audience in own_audiences(kube.token_file):
            raise AccessConfigError(f"{where}: audience {audience!r} is the Kubernetes API server's own (the "
                                    "engine's token carries it): the engine would collect tokens that open the API; "
                                    "choose another, such as ragengine.io/<namespace>/<name>")
        if self.reviewer is None:
            self.reviewer = TokenReviewer(kube.url, kube.token_file, kube.ca_file, kube.cache_s, stale_s=kube.stale_s,
                                          budget=ReviewBudget(kube.per_client_per_minute, kube.per_minute))

    def check_patterns(self) -> list[str]:
        """Warn (log, ``warnings``) about index patterns matching no index; called after the indexes load
        and after each reload."""
        if self.index_names is None:
            return []
        self.warnings = unmatched_patterns(self._keyring.principals, self.index_names())
        for warning in self.warnings:
            log.warning("access rules: %s", warning)
        return self.warnings

    def keyring(self) -> Keyring:
        """The rules in force, re-read first when the file changed (checked at most once a second)."""
        if self.path is None or self.clock() - self._checked < CHECK_EVERY_S:
            return self._keyring
        with self._lock:
            if self.clock() - self._checked < CHECK_EVERY_S:
                return self._keyring
            self._checked = self.clock()
            stamp = file_stamp(self.path)
            if stamp == self._stamp:
                return self._keyring
            self._stamp = stamp
            try:
                self._keyring = self._load()
            except AccessConfigError as exc:
                self.last_error = str(exc)
                ACCESS_RELOADS.labels("error").inc()
                log.error("access rules NOT reloaded, the previous rules stay in force: %s", exc)
            else:
                self.last_error = None
                ACCESS_RELOADS.labels("ok").inc()
                log.info("access rules reloaded from %s: %d principal(s)", self.path, len(self._keyring.principals))
                self.check_patterns()
        return self._keyring

    async def watch(self, stack: AsyncExitStack) -> None:
        """Check the file every second in the background too, so a bad edit is reported (log, metric) when it
        lands, not at the next request."""
        if self.path is None:
            return

        async def loop() -> None:
            while True:
                await asyncio.sleep(CHECK_EVERY_S)
                await asyncio.to_thread(self.keyring)

        task = asyncio.create_task(loop(), name="access-file-watch")
        stack.callback(task.cancel)

    async def close(self) -> None:
        if self.reviewer is not None:
            await self.reviewer.aclose()

    async def authenticate(self, authorization: str | None, client: str | None = None) -> Principal | None:
        """The principal an ``Authorization`` header value names; None when it names none. ``client``: the
        caller's address (the review budget's key)."""
        keyring = self.keyring()
        if not keyring.enabled:
            return ANONYMOUS
        if not authorization or not authorization.startswith("Bearer "):
            return None
        token = authorization[len("Bearer "):].strip()
        principal = keyring.authenticate(token)
        if principal is not None or not keyring.accounts or self.reviewer is None or jwt_claims(token) is None:
            return principal
        assert keyring.audience is not None, "AccessRules requires an audience with serviceAccounts"
        # The rules in force decide who the account is: a rule removed since the review no longer admits it.
        # ReviewUnavailable: the caller's 503; ReviewThrottled: 429
        account = await self.reviewer.review(token, keyring.audience, keyring.accounts, client)
        return keyring.accounts.get(account) if account is not None else None
