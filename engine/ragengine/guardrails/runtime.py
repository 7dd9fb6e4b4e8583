"""The output policy in force: ``RAGENGINE_GUARDRAILS_POLICY`` loaded at start, re-read when it changes.

The file is checked at most once a second (its inode, size and modification time: a Kubernetes
ConfigMap volume swaps a symlink, which changes the inode) by a background task and by the requests
themselves, so an edit applies within a second or so of reaching the pod, with no restart. A file that
cannot be used (not YAML, not a mapping, unreadable, gone) is refused: the last good policy keeps
serving, and the error is logged, counted (``ragengine_guardrails_policy_reloads_total{outcome="error"}``)
and shown (``ragengine_guardrails_policy_error`` 1 on ``/metrics``; the operator's GuardrailsPolicy
condition says the same of the ConfigMap). With no good policy
at all (a bad file at start), ``fail_open`` decides: false (the default) refuses answers with a 503,
true sends them unscreened and says so in their ``guardrails`` field.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from ragengine.errors import EngineError
from ragengine.filestamp import file_stamp
from ragengine.guardrails.metrics import POLICY_ERROR, POLICY_RELOADS, POLICY_SCANNERS, POLICY_WARNINGS
from ragengine.guardrails.policy import PolicyError, parse_policy
from ragengine.guardrails.scan import OutputGuard

log = logging.getLogger("ragengine.guardrails")
CHECK_EVERY_S = 1.0


class GuardrailsUnavailable(EngineError):
    """Fail-closed: no usable policy, or a scanner failed; the answer is not sent unscreened."""

    status_code = 503
    error_type = "guardrails_unavailable"


class Guardrails:
    def __init__(self, path: Path | None, *, fail_open: bool = False, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.fail_open = fail_open
        self.clock = clock
        self.last_error: str | None = None
        self._guard: OutputGuard | None = None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._checked = clock()
        if path is not None:
            self._stamp = file_stamp(path)
            self._load()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def _load(self) -> None:
        assert self.path is not None
        try:
            data = self.path.read_bytes()
            guard = OutputGuard(parse_policy(data))
        except OSError as exc:
            self._refuse(f"cannot be read: {exc.strerror or exc}")
            return
        except PolicyError as exc:
            self._refuse(str(exc))
            return
        old = self._guard
        self._guard, self.last_error = guard, None
        POLICY_RELOADS.labels("ok").inc()
        POLICY_ERROR.set(0)
        POLICY_SCANNERS.set(len(guard.policy.scanners))
        problems = [*guard.policy.warnings, *guard.warnings]
        POLICY_WARNINGS.set(len(problems))
        for problem in problems:
            log.warning("guardrails policy %s: %s", self.path, problem)
        log.info("guardrails policy %s %s: %d scanner(s) [%s], sha256 %s", self.path,
                 "loaded" if old is None else "reloaded", len(guard.policy.scanners),
                 ", ".join(f"{s.type}:{s.action}" for s in guard.policy.scanners), guard.policy.digest)

    def _refuse(self, why: str) -> None:
        self.last_error = f"guardrails policy {self.path}: {why}"
        POLICY_RELOADS.labels("error").inc()
        POLICY_ERROR.set(1)
        if self._guard is None:
            log.error("%s; no policy is in force (fail_%s)", self.last_error, "open" if self.fail_open else "closed")
        else:
            log.error("%s; the previous policy (sha256 %s) stays in force", self.last_error, self._guard.policy.digest)

    def current(self) -> OutputGuard | None:
        """The policy in force, re-read first when the file changed (checked at most once a second)."""
        if self.path is None or self.clock() - self._checked < CHECK_EVERY_S:
            return self._guard
        with self._lock:
            if self.clock() - self._checked >= CHECK_EVERY_S:
                self._checked = self.clock()
                stamp = file_stamp(self.path)
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._load()
        return self._guard

    def for_answer(self) -> OutputGuard | None:
        """The guard an answer goes through; None = none configured (or fail-open without a policy).
        Raises ``GuardrailsUnavailable`` when fail-closed and no policy could ever be loaded."""
        if self.path is None:
            return None
        guard = self.current()
        if guard is None and not self.fail_open:
            raise GuardrailsUnavailable(f"Output guardrails are not available: {self.last_error}")
        return guard if guard is not None and guard.active else None

    def status(self) -> dict[str, Any]:
        guard = self._guard
        return {"enabled": self.enabled, "policy": str(self.path) if self.path else None,
                "sha256": guard.policy.sha256 if guard else None,
                "scanners": [s.type for s in guard.policy.scanners] if guard else [],
                "fail_open": self.fail_open, "error": self.last_error}

    async def watch(self, stack: AsyncExitStack) -> None:
        """Check the file every second in the background too, so an edit (and a bad one) is picked up and
        reported when it lands, not at the next answer."""
        if self.path is None:
            return

        async def loop() -> None:
            while True:
                await asyncio.sleep(CHECK_EVERY_S)
                await asyncio.to_thread(self.current)

        task = asyncio.create_task(loop(), name="guardrails-policy-watch")
        stack.callback(task.cancel)
