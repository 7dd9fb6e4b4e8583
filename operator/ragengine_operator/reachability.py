"""InferenceReady follows an external LLM between resyncs.

An outage of ``inference.url`` changes no Kubernetes object, so no watch reports it, and the resync (300 s
at the chart's default, plus jitter) is too slow to be the only check. This loop probes each url-mode
RAGEngine's endpoint every ``reachability_seconds`` (the same probe, egress rules and cache the status uses)
and recomputes that RAGEngine's status when the answer disagrees with the InferenceReady condition the
object records: an outage or a recovery shows within about a minute at the defaults.

The object's own condition is the baseline, not this process's first answer: a leader that takes over
during an outage (its first probe already fails) still reports it. A RAGEngine without the condition yet
is left to its first reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from . import constants as c
from .controller import Controller

log = logging.getLogger(__name__)

Probe = Callable[[str, str | None], str | None]  # (url, model) -> None when reachable, else why not
Target = tuple[str, str | None, bool | None]  # (url, served model, InferenceReady as recorded; None: not yet)


async def reachability_loop(controller: Controller, targets: Mapping[tuple[str, str], object], probe: Probe,
                            interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        current = {key: t for key, value in list(targets.items()) if (t := _target(value)) is not None}
        for key, (url, model, recorded) in current.items():
            try:
                verdict = await asyncio.to_thread(probe, url, model)
            except Exception as exc:  # a probe never raises by design; keep looping if one does
                log.warning("probing %s for %s/%s failed: %s", url, *key, exc)
                continue
            if recorded is None or recorded == (verdict is None):
                continue
            log.info("inference URL of %s/%s is now %s", *key, "reachable" if verdict is None else "unreachable")
            try:
                await asyncio.to_thread(controller.sync_status, *key)
            except Exception as exc:  # the next tick (or the resync loop) catches up
                log.warning("status of %s/%s not updated now: %s", *key, exc)


def target(spec: Mapping[str, object], status: Mapping[str, object] | None = None) -> Target | None:
    """(url, served model, InferenceReady as recorded) of a url-mode RAGEngine; None for any other (or an
    invalid spec)."""
    from pydantic import ValidationError

    from .manifests.engine_env import served_model
    from .spec import RAGEngineSpec

    try:
        parsed = RAGEngineSpec.model_validate(dict(spec))
    except ValidationError:
        return None
    if parsed.inference is None or parsed.inference.url is None:
        return None
    return parsed.inference.url, served_model(parsed), _recorded(status or {})


def _recorded(status: Mapping[str, object]) -> bool | None:
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == c.INFERENCE_READY:
            return {"True": True, "False": False}.get(str(condition.get("status")))
    return None


def _target(store: object) -> Target | None:
    """kopf's index keeps the values the handler returned for a key in a store: the last one is current."""
    values = list(store) if not isinstance(store, tuple) else [store]  # type: ignore[call-overload]
    return values[-1] if values else None
