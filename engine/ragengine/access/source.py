"""The access rules in force: built from settings at start, re-read when the access file changes.

A bad file at start-up stops the engine with a message naming the file and the fault. A bad file later
(a typo in a ConfigMap or Secret edit) is refused: the previous rules keep serving, nothing opens up, and
the error is logged and counted (``ragengine_access_reloads_total{outcome="error"}``). The file is checked
at most once a second, by its inode, size and modification time (a Kubernetes Secret or ConfigMap volume
swaps a symlink, which changes the inode), so an edit applies within a second or so of reaching the pod.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from ragengine.access.rules import ANONYMOUS, AccessRules, Principal, Role, key_digest
from ragengine.metrics import ACCESS_RELOADS

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
    for rule in rules.keys if rules else ():
        if rule.name == API_KEY_PRINCIPAL and api_key:
            raise AccessConfigError(f"the key name {API_KEY_PRINCIPAL!r} is taken by RAGENGINE_API_KEY")
        entries.append((rule.digest(), Principal(rule.name, "key", rule.role, tuple(rule.indexes),
                                                 frozenset(rule.groups))))
    if len({d for d, _ in entries}) != len(entries):
        raise AccessConfigError("a key in the access file is the same as RAGENGINE_API_KEY")
    return Keyring(tuple(entries), enabled=bool(api_key) or rules is not None)


def parse_rules(text: str, origin: str) -> AccessRules:
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
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise AccessConfigError(f"{origin}: {problems}") from None


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class AccessSource:
    def __init__(self, api_key: str | None, access_file: Path | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api_key = api_key
        self.path = access_file
        self.clock = clock
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._checked = clock()
        self._stamp = _stamp(access_file) if access_file else None
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
        return build_keyring(self.api_key, rules)

    def keyring(self) -> Keyring:
        """The rules in force, re-read first when the file changed (checked at most once a second)."""
        if self.path is None or self.clock() - self._checked < CHECK_EVERY_S:
            return self._keyring
        with self._lock:
            if self.clock() - self._checked < CHECK_EVERY_S:
                return self._keyring
            self._checked = self.clock()
            stamp = _stamp(self.path)
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
                log.info("access rules reloaded from %s: %d principal(s)", self.path, len(self._keyring.entries))
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

    async def authenticate(self, authorization: str | None) -> Principal | None:
        """The principal an ``Authorization`` header value names; None when it names none."""
        keyring = self.keyring()
        if not keyring.enabled:
            return ANONYMOUS
        if not authorization or not authorization.startswith("Bearer "):
            return None
        return keyring.authenticate(authorization[len("Bearer "):].strip())
