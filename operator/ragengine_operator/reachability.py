"""InferenceReady follows an external LLM between resyncs.

An outage of ``inference.url`` changes no Kubernetes object, so no watch reports it, and the resync (300 s
at the chart's default, plus jitter) is too slow to be the only check. This loop probes each url-mode
RAGEngine's endpoint every ``reachability_seconds`` (the same probe, egress rules and cache the status uses)
and recomputes that RAGEngine's status when the answer changes: an outage or a recovery shows within
about a minute at the defaults. The first answer for a RAGEngine is its baseline (its reconcile has just
probed the same way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from .controller import Controller

log = logging.getLogger(__name__)

Probe = Callable[[str, str | None], str | None]  # (url, model) -> None when reachable, else why not


async def reachability_loop(controller: Controller, targets: Mapping[tuple[str, str], object], probe: Probe,
                            interval: float) -> None:
    known: dict[tuple[str, str], str | None] = {}
    while True:
        await asyncio.sleep(interval)
        current = {key: t for key, value in list(targets.items()) if (t := _target(value)) is not None}
        for key in set(known) - set(current):
            del known[key]
        for key, (url, model) in current.items():
            try:
                verdict = await asyncio.to_thread(probe, url, model)
            except Exception as exc:  # a probe never raises by design; keep looping if one does
                log.warning("probing %s for %s/%s failed: %s", url, *key, exc)
                continue
            if key in known and (known[key] is None) != (verdict is None):
                log.info("inference URL of %s/%s is now %s", *key, "reachable" if verdict is None else "unreachable")
                try:
                    await asyncio.to_thread(controller.sync_status, *key)
                except Exception as exc:  # the resync loop catches up
                    log.warning("status of %s/%s not updated now: %s", *key, exc)
                    continue
            known[key] = verdict


def target(spec: Mapping[str, object]) -> tuple[str, str | None] | None:
    """(url, served model) of a url-mode RAGEngine's spec; None for any other (or an invalid spec)."""
    from pydantic import ValidationError

    from .manifests.engine_env import served_model
    from .spec import RAGEngineSpec

    try:
        parsed = RAGEngineSpec.model_validate(dict(spec))
    except ValidationError:
        return None
    if parsed.inference is None or parsed.inference.url is None:
        return None
    return parsed.inference.url, served_model(parsed)


def _target(store: object) -> tuple[str, str | None] | None:
    """kopf's index keeps the values the handler returned for a key in a store: the last one is current."""
    values = list(store) if not isinstance(store, tuple) else [store]  # type: ignore[call-overload]
    return values[-1] if values else None
