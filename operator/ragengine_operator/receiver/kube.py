"""The receiver's two API calls: which source a hook names (and its key), and asking for its sync.

Typed clients of the receiver's own ``ApiClient`` (every replica's side server has one: kopf and its
dynamic client run only where the replica leads), so nothing is discovered before the first push.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from .. import constants as c
from ..spec.sources import Source
from .server import Hooked, LookupUnavailable

log = logging.getLogger(__name__)
TTL_S = 5.0  # a flood of pushes costs an API read per source every few seconds, not one per request
TIMEOUT_S = 10
MERGE_PATCH = "application/merge-patch+json"


class ApiLookup:
    """The source ``<namespace>/<name>/<source>`` and its webhook Secret's ``token``, read with the operator's
    identity and kept ``TTL_S`` (an edited secret applies within it). A RAGEngine, source or Secret that does
    not exist, or that the operator may not read (a namespace it does not serve), is None; an API server that
    does not answer is ``LookupUnavailable`` (not kept: the next push asks again)."""

    def __init__(self, api: k8s.ApiClient, ttl: float = TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.objects, self.core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
        self.ttl, self.clock = ttl, clock
        self.cache: dict[tuple[str, str, str], tuple[float, Hooked | None]] = {}

    def __call__(self, namespace: str, name: str, source: str) -> Hooked | None:
        key, now = (namespace, name, source), self.clock()
        held = self.cache.get(key)
        if held is not None and held[0] > now:
            return held[1]
        try:
            found = self._read(namespace, name, source)
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise LookupUnavailable(f"the API server answered {exc.status} ({exc.reason})") from None
            log.warning("webhook for %s/%s/%s: %s", namespace, name, source, exc.reason)
            found = None
        except Exception as exc:  # unreachable, timed out: say so, keep nothing
            raise LookupUnavailable(f"the API server did not answer ({type(exc).__name__})") from None
        if len(self.cache) > 10_000:
            self.cache.clear()
        self.cache[key] = (now + self.ttl, found)
        return found

    def _read(self, namespace: str, name: str, source: str) -> Hooked | None:
        obj: dict = self.objects.get_namespaced_custom_object(  # type: ignore[assignment]  # JSON, typed object
            c.GROUP, c.VERSION, namespace, c.PLURAL, name, _request_timeout=TIMEOUT_S)
        entry = next((s for s in (obj.get("spec") or {}).get("sources") or [] if s.get("name") == source), None)
        if entry is None:
            return None
        try:
            spec = Source.model_validate(entry)
        except ValueError:
            return None
        if spec.webhook is None:
            return None
        secret = self.core.read_namespaced_secret(spec.webhook.secret_ref.name, namespace, _request_timeout=TIMEOUT_S)
        token = (secret.data or {}).get("token")
        if not token:
            log.warning("webhook of source %s of %s/%s: Secret %s has no key 'token'", source, namespace, name,
                        spec.webhook.secret_ref.name)
            return None
        return Hooked(spec, base64.b64decode(token).decode("utf-8", "replace").strip())


def annotator(api: k8s.ApiClient) -> Callable[[str, str, str, str], None]:
    """Writes ``sync.ragengine.io/<source>: <delivery>`` on the RAGEngine (a merge patch: the others stay)."""
    objects = k8s.CustomObjectsApi(api)

    def request_sync(namespace: str, name: str, source: str, token: str) -> None:
        objects.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, name,
            {"metadata": {"annotations": {c.SOURCE_SYNC_ANNOTATION_PREFIX + source: token}}},
            _content_type=MERGE_PATCH, _request_timeout=TIMEOUT_S)
    return request_sync
