"""The receiver's two API calls: which source a hook names (and its key), and asking for its sync."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable

from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from .. import constants as c
from ..kube import apply as kube
from ..sources.spec import Source
from .server import Hooked

log = logging.getLogger(__name__)
TTL_S = 5.0  # a flood of pushes costs an API read per source every few seconds, not one per request


class ApiLookup:
    """The source ``<namespace>/<name>/<source>`` and its webhook Secret's ``token``, read with the operator's
    identity and kept ``TTL_S`` (an edited secret applies within it)."""

    def __init__(self, dyn: DynamicClient, ttl: float = TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.dyn, self.ttl, self.clock = dyn, ttl, clock
        self.cache: dict[tuple[str, str, str], tuple[float, Hooked | None]] = {}

    def __call__(self, namespace: str, name: str, source: str) -> Hooked | None:
        key, now = (namespace, name, source), self.clock()
        held = self.cache.get(key)
        if held is not None and held[0] > now:
            return held[1]
        try:
            found = self._read(namespace, name, source)
        except ApiException as exc:
            log.warning("webhook for %s/%s/%s: %s", namespace, name, source, exc.reason)
            found = None
        if len(self.cache) > 10_000:
            self.cache.clear()
        self.cache[key] = (now + self.ttl, found)
        return found

    def _read(self, namespace: str, name: str, source: str) -> Hooked | None:
        obj = kube.get(self.dyn, c.API_VERSION, c.KIND, namespace, name)
        entry = next((s for s in ((obj or {}).get("spec") or {}).get("sources") or [] if s.get("name") == source), None)
        if entry is None:
            return None
        try:
            spec = Source.model_validate(entry)
        except ValueError:
            return None
        if spec.webhook is None:
            return None
        secret = kube.get(self.dyn, "v1", "Secret", namespace, spec.webhook.secret_ref.name)
        token = ((secret or {}).get("data") or {}).get("token")
        if not token:
            log.warning("webhook of source %s of %s/%s: Secret %s has no key 'token'", source, namespace, name,
                        spec.webhook.secret_ref.name)
            return None
        return Hooked(spec, base64.b64decode(token).decode("utf-8", "replace").strip())


def annotator(dyn: DynamicClient) -> Callable[[str, str, str, str], None]:
    def request_sync(namespace: str, name: str, source: str, token: str) -> None:
        kube.annotate_ragengine(dyn, namespace, name, {c.SOURCE_SYNC_ANNOTATION_PREFIX + source: token})
    return request_sync
