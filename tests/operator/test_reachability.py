"""The reachability loop (operator/ragengine_operator/reachability.py): a url-mode RAGEngine's status is
recomputed when its LLM's answer changes between resyncs, and only then (issue 48: an outage showed only at
the next resync, up to 6 minutes at the chart's defaults). The real probe against a real server is
tests/node/test_upgrade_on_node.py's, at the chart's defaults."""

from __future__ import annotations

import asyncio

from ragengine_operator.reachability import reachability_loop, target


class Recorder:
    def __init__(self) -> None:
        self.synced: list[tuple[str, str]] = []

    def sync_status(self, namespace: str, name: str) -> None:
        self.synced.append((namespace, name))


async def test_status_is_recomputed_when_the_answer_changes_and_only_then():
    answers = {"http://a/v1": [None, None, "unreachable", "unreachable", None, None],
               "http://b/v1": [None] * 6}
    calls: dict[str, int] = {}

    def probe(url: str, model: str | None) -> str | None:
        n = calls.get(url, 0)
        calls[url] = n + 1
        return answers[url][min(n, len(answers[url]) - 1)]

    targets = {("t", "a"): [("http://a/v1", "m")], ("t", "b"): [("http://b/v1", None)]}
    recorder = Recorder()
    task = asyncio.create_task(reachability_loop(recorder, targets, probe, 0.01))  # type: ignore[arg-type]
    while calls.get("http://a/v1", 0) < 6:
        await asyncio.sleep(0.01)
    task.cancel()
    assert recorder.synced == [("t", "a"), ("t", "a")]  # the outage, then the recovery; b never changed


def test_only_url_mode_ragengines_are_probed():
    assert target({"inference": {"url": "http://llm/v1", "servedModelName": "m"}}) == ("http://llm/v1", "m")
    assert target({"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}}) is None  # vLLM in the cluster
    assert target({}) is None  # retrieval only
    assert target({"inference": {"url": "ftp://x"}}) is None  # a spec the operator refuses anyway
