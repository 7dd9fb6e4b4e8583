"""Hostile engines beside a benign tenant (issue 41, finding 1): the operator, in this process (kopf) against
the real control plane, serves four RAGEngines whose engines it reaches through its ``engine_url`` setting,
each a real HTTP server on loopback: ``benign`` answers /health at once; ``flood`` answers it with 256 MiB of
valid JSON; ``trickle-a`` and ``trickle-b`` send one byte every 1.5 s (each read well within a read timeout).

With two worker threads (``max_workers`` 2, so two tricklers are "as many tricklers as workers", the review's
16 of 16), the benign tenant's edits still reconcile: the time from an edit to its ``observedGeneration`` is
measured alone and beside the hostile engines, and must stay within LATENCY_LIMIT_S (the old code never got
there: each trickler held a worker for as long as it trickled). The process's peak resident set while the
hostile engines are asked stays far below what the flood sends (the old code read it whole, and parsed it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from ragengine_operator import constants as c
from tests.support.bounded import peak_kib, reset_peak
from tests.support.hostile_http import answer, flood, trickle
from tests.support.web import web_server

from .conftest import OPERATOR_ENV
from .kube import wait_for

MiB = 1024 * 1024
FLOOD = 256 * MiB
LATENCY_LIMIT_S = 45.0  # generous: a trickler alone would hold a worker for TRICKLE_S
TRICKLE_S = 240.0
SPEC = {"storage": {"volume": {"size": "1Gi"}}}
HEALTHY = {"status": "Healthy", "indexes": {"docs": {"version": 1, "current": True, "documents": 3}}}
HOSTILE = ("flood", "trickle-a", "trickle-b")


@contextlib.contextmanager
def operator(ns: str, engine_url: str) -> Iterator[None]:
    from kopf.testing import KopfRunner

    env = {**OPERATOR_ENV, "RAGENGINE_OPERATOR_ENGINE_URL": engine_url, "RAGENGINE_OPERATOR_MAX_WORKERS": "2",
           "RAGENGINE_OPERATOR_POST_EVENTS": "false"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        with KopfRunner(["run", "--standalone", f"--namespace={ns}", "-m", "ragengine_operator.handlers"],
                        timeout=60) as runner:
            yield
    assert runner.exception is None, runner.output[-3000:]


def edit_latency(kube, ns: str, value: str) -> float:
    """Seconds from an edit of the benign RAGEngine's spec to the operator's status for that generation."""
    started = time.monotonic()
    generation = kube.patch_rag(ns, "benign", {"spec": {"engine": {"env": [{"name": "EDIT", "value": value}]}}}
                                )["metadata"]["generation"]
    wait_for(lambda: (kube.get_rag(ns, "benign").get("status") or {}).get("observedGeneration") == generation,
             LATENCY_LIMIT_S, f"the benign RAGEngine's edit {value!r} to be reconciled")
    return time.monotonic() - started


def reindexing_message(kube, ns: str, name: str) -> str:
    cond = kube.condition(ns, name, c.REINDEXING) or {}
    return cond.get("message", "")


def test_hostile_engines_neither_stall_nor_bloat_the_operator(kube, bare_namespace):
    ns = bare_namespace
    stop = threading.Event()
    routes = {f"/{ns}/benign/health": answer(HEALTHY), f"/{ns}/flood/health": flood(FLOOD),
              f"/{ns}/trickle-a/health": trickle(stop, for_s=TRICKLE_S),
              f"/{ns}/trickle-b/health": trickle(stop, for_s=TRICKLE_S)}
    with web_server(routes) as engines, operator(ns, engines.base + "/{namespace}/{name}"):
        try:
            kube.create_rag(ns, "benign", SPEC)
            wait_for(lambda: [i.get("name") for i in (kube.get_rag(ns, "benign").get("status") or {}).get(
                "indexes") or []] == ["docs"], 60, "the benign engine's indexes in its status")
            alone = edit_latency(kube, ns, "alone")

            before = reset_peak()
            for name in HOSTILE:
                kube.create_rag(ns, name, SPEC)
            asked = lambda name: sum(path == f"/{ns}/{name}/health" for path, _ in engines.seen)  # noqa: E731
            wait_for(lambda: all(asked(name) >= 1 for name in HOSTILE), 90, "each hostile engine asked")
            beside = [edit_latency(kube, ns, f"beside-{i}") for i in range(3)]
            grew_mib = (peak_kib() - before) / 1024
            # the hostile tenants are told why their indexes are unknown
            wait_for(lambda: "larger than" in reindexing_message(kube, ns, "flood"), 30, "flood's reason")
            wait_for(lambda: "did not finish within" in reindexing_message(kube, ns, "trickle-a"), 30,
                     "trickle-a's reason")
        finally:
            stop.set()  # the tricklers end, so no worker thread outlives the operator
    print(f"\nbenign edit reconciled in {alone:.1f} s alone, in {', '.join(f'{x:.1f}' for x in beside)} s beside "
          f"a {FLOOD // MiB} MiB /health and two trickling ones (2 workers); peak RSS growth {grew_mib:.0f} MiB")
    assert grew_mib < 150, f"the operator's process grew {grew_mib:.0f} MiB while a {FLOOD // MiB} MiB /health was read"
