"""The reachability loop (operator/ragengine_operator/reachability.py): a url-mode RAGEngine's status is
recomputed when its LLM's answer changes between resyncs, and only then (issue 48: an outage showed only at
the next resync, up to 6 minutes at the chart's defaults). The real probe against a real server is
tests/node/test_upgrade_on_node.py's, at the chart's defaults."""

from __future__ import annotations

import asyncio

from ragengine_operator.reachability import reachability_loop, target


class Recorder:
    """The controller, as the loop sees it: a status sync records the probe's answer as InferenceReady, which
    comes back to the loop through the index (kopf's index follows the object's status writes)."""

    def __init__(self, targets: dict, probe) -> None:
        self.synced: list[tuple[str, str]] = []
        self.targets, self.probe = targets, probe

    def sync_status(self, namespace: str, name: str) -> None:
        self.synced.append((namespace, name))
        url, model, _ = self.targets[(namespace, name)][-1]
        self.targets[(namespace, name)] = [(url, model, self.probe(url, model) is None)]


async def test_status_is_recomputed_when_the_answer_changes_and_only_then():
    answers = {"http://a/v1": [None, None, "unreachable", "unreachable", None, None],
               "http://b/v1": [None] * 6}
    calls: dict[str, int] = {}

    def probe(url: str, model: str | None) -> str | None:
        n = calls.get(url, 0)
        calls[url] = n + 1
        return answers[url][min(n, len(answers[url]) - 1)]

    targets = {("t", "a"): [("http://a/v1", "m", True)], ("t", "b"): [("http://b/v1", None, True)]}
    recorder = Recorder(targets, lambda url, model: answers[url][min(calls.get(url, 1) - 1, 5)])
    task = asyncio.create_task(reachability_loop(recorder, targets, probe, 0.01))  # type: ignore[arg-type]
    while calls.get("http://a/v1", 0) < 6:
        await asyncio.sleep(0.01)
    task.cancel()
    assert recorder.synced == [("t", "a"), ("t", "a")]  # the outage, then the recovery; b never changed


async def test_a_leader_that_starts_during_an_outage_reports_it():
    """The object says InferenceReady=True; the new leader's first probe already fails (the LLM went down while
    no replica led, or just before its first tick): the status is recomputed, not taken as the baseline (the
    loop used to keep its first answer as the baseline, and the outage showed only at the next resync)."""
    calls = []

    def probe(url: str, model: str | None) -> str | None:
        calls.append(url)
        return "unreachable"

    targets = {("t", "a"): [("http://a/v1", "m", True)], ("t", "new"): [("http://a/v1", "m", None)]}
    recorder = Recorder(targets, probe)
    task = asyncio.create_task(reachability_loop(recorder, targets, probe, 0.01))  # type: ignore[arg-type]
    while len(calls) < 6:
        await asyncio.sleep(0.01)
    task.cancel()
    assert recorder.synced == [("t", "a")]  # once: the status then records it; "new" awaits its first reconcile


def test_only_url_mode_ragengines_are_probed():
    assert target({"inference": {"url": "http://llm/v1", "servedModelName": "m"}}) == ("http://llm/v1", "m", None)
    ready = {"conditions": [{"type": "Ready", "status": "False"}, {"type": "InferenceReady", "status": "True"}]}
    assert target({"inference": {"url": "http://llm/v1"}}, ready)[2] is True
    assert target({"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}}) is None  # vLLM in the cluster
    assert target({}) is None  # retrieval only
    assert target({"inference": {"url": "ftp://x"}}) is None  # a spec the operator refuses anyway
