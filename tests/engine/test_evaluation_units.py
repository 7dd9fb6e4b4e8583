"""The evaluation's pure parts: per-question scores, the gate's verdict, golden-set checks, schedules."""

from __future__ import annotations

import math
from datetime import datetime

import pytest

from ragengine.errors import BadRequest, PayloadTooLarge
from ragengine.evaluation import gate, golden, schedule
from ragengine.evaluation import metrics as m
from ragengine.protocol.evaluations import GoldenQuestion


def test_score_question_and_aggregate_literal_values():
    one = m.score_question(["x", "a", "a", "b"], ["a", "b", "c"], 3)  # b is at rank 4: cut off at 3
    assert one["first_relevant_rank"] == 2 and one["mrr"] == 0.5 and one["hit_rate"] == 1.0
    assert one["recall"] == pytest.approx(1 / 3)
    assert one["ndcg"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3) + 1 / math.log2(4)))
    miss = m.score_question(["x", "y"], ["a"], 10)
    assert miss == {"first_relevant_rank": None, "mrr": 0.0, "recall": 0.0, "ndcg": 0.0, "hit_rate": 0.0}
    assert m.aggregate([one, miss], 3) == {"mrr@3": 0.25, "recall@3": pytest.approx(1 / 6),
                                          "ndcg@3": pytest.approx(one["ndcg"] / 2), "hit_rate@3": 0.5}


def test_bench_eval_uses_the_engine_metrics():
    from bench.eval import metrics as bench_metrics

    assert bench_metrics.mrr is m.mrr and bench_metrics.summarise is m.summarise


def test_metric_names():
    assert m.metric_name("MRR@10") == ("mrr", 10) and m.metric_name("hit_rate@5") == ("hit_rate", 5)
    for bad in ("mrr", "precision@10", "ndcg@0", "recall@x"):
        with pytest.raises(ValueError, match="mrr@<k>"):
            m.metric_name(bad)


def test_gate_verdicts():
    ok = gate.decide("mrr@10", 0.70, 0.71, 0.5, 0.02, version=3, live=2)
    assert ok.passed and ok.message == "version 3 passed the gate: mrr@10 0.7000 (live version 2: 0.7100)"
    low = gate.decide("mrr@10", 0.40, None, 0.5, None, version=3, live=2)
    assert not low.passed and "below the minimum 0.5000" in low.message
    worse = gate.decide("mrr@10", 0.60, 0.70, None, 0.02, version=3, live=2)
    assert not worse.passed and "0.1000 below live version 2's 0.7000, more than maxRegression 0.0200" in worse.message
    assert gate.decide("mrr@10", 0.68, 0.70, None, 0.02, version=3, live=2).passed  # exactly at the limit


def _q(i: int, **extra) -> GoldenQuestion:
    return GoldenQuestion(id=f"q{i}", question=f"question {i}", relevant_doc_ids=[f"d{i}"], **extra)


def test_golden_set_refusals_and_jsonl():
    with pytest.raises(BadRequest, match="empty"):
        golden.check([], 10)
    with pytest.raises(BadRequest, match="'q1' appear more than once"):
        golden.check([_q(1), _q(2), _q(1)], 10)
    with pytest.raises(PayloadTooLarge, match="3 questions; at most 2"):
        golden.check([_q(1), _q(2), _q(3)], 2)
    text = '# a comment\n{"id": "a", "question": "q?", "relevant_doc_ids": ["x"]}\n\n' \
           '{"id": "b", "question": "r?", "relevant_doc_ids": ["y"], "reference_answer": "yes"}\n'
    assert [q["id"] for q in golden.parse_jsonl(text, 10)] == ["a", "b"]
    with pytest.raises(BadRequest, match="line 2 of the golden set: relevant_doc_ids"):
        golden.parse_jsonl('{"id": "a", "question": "q", "relevant_doc_ids": ["x"]}\n'
                           '{"id": "b", "question": "q", "relevant_doc_ids": []}', 10)
    with pytest.raises(BadRequest, match="line 1 of the golden set"):
        golden.parse_jsonl("{not json", 10)


def test_fingerprint_covers_set_settings_and_reader():
    qs = [_q(1).model_dump(exclude_none=True)]
    base = golden.fingerprint(qs, {"top_k": 10}, None)
    assert base == golden.fingerprint(qs, {"top_k": 10, "filters": None, "answers": True}, None)
    assert base != golden.fingerprint(qs, {"top_k": 5}, None)
    assert base != golden.fingerprint(qs, {"top_k": 10}, ["user:a"])


def test_schedules():
    at = datetime(2026, 11, 28, 10, 7, 30)
    assert schedule.next_fire("@every 6h", at) == datetime(2026, 11, 28, 16, 7, 30)
    assert schedule.next_fire("30m", at) == datetime(2026, 11, 28, 10, 37, 30)
    assert schedule.next_fire("@hourly", at) == datetime(2026, 11, 28, 11, 0)
    assert schedule.next_fire("*/15 * * * *", at) == datetime(2026, 11, 28, 10, 15)
    assert schedule.next_fire("0 3 * * *", at) == datetime(2026, 11, 29, 3, 0)
    assert schedule.next_fire("0 9 * * 1-5", at) == datetime(2026, 11, 30, 9, 0)  # the 28th is a Saturday
    assert schedule.next_fire("0 0 1 * *", at) == datetime(2026, 12, 1, 0, 0)
    for bad in ("every day", "61 * * * *", "* * *", "@every 5s"):
        with pytest.raises(ValueError, match="schedule"):
            schedule.parse(bad)


async def test_a_refresh_that_read_earlier_never_overwrites_one_that_read_later(tmp_path):
    """Two refreshes at once (a run's end, the 30 s loop): the one that read the runs first may answer last. It
    used to set the gauges last, so /metrics lost the newest version's score (test_evaluation_gate, loaded)."""
    import asyncio

    from prometheus_client import generate_latest

    from ragengine import metrics as prom
    from ragengine.evaluation.service import EvaluationService
    from ragengine.evaluation.store import Run
    from ragengine.settings import EngineSettings

    def run(version: int) -> Run:
        at = datetime(2026, 11, 28, 12, version)
        return Run(f"r{version}", "kb", version, "succeeded", "gate", None, None, "", {}, [], 1, 1,
                   {"mrr@5": version / 10}, None, None, at, at, at)

    class Runs:  # the store's latest(), as the database answers it before and after version 3's run ends
        def __init__(self) -> None:
            self.calls = 0

        async def latest(self) -> dict:
            self.calls += 1
            if self.calls == 1:  # read first, answers last
                await asyncio.sleep(0.2)
                return {"kb": [run(2)]}
            return {"kb": [run(3), run(2)]}

    service = EvaluationService(EngineSettings(data_dir=tmp_path), None, Runs())  # type: ignore[arg-type]
    first = asyncio.create_task(service.refresh())
    await asyncio.sleep(0.05)
    await asyncio.gather(first, service.refresh())
    assert [r["version"] for r in service.last["kb"]] == [3, 2]
    text = generate_latest(prom.REGISTRY).decode()
    assert 'ragengine_evaluation_score{index="kb",metric="mrr@5",version="3"} 0.3' in text


def test_one_engines_gauges_leave_another_engines_alone():
    """Each refresh replaces the series it set last time, never all of them: another engine in the process
    (the tests run several per worker) lost its scores to a refresh that cleared the gauge."""
    from prometheus_client import generate_latest

    from ragengine import metrics as prom

    mine = prom.set_evaluation_scores({"kb-mine": [(1, {"mrr@3": 0.5}, 1.0)]})
    theirs = prom.set_evaluation_scores({"kb-theirs": [(1, {"mrr@3": 0.9}, 1.0)]})
    prom.set_evaluation_scores({}, theirs)  # the other engine's index is gone: its series go, mine stay
    text = generate_latest(prom.REGISTRY).decode()
    assert 'ragengine_evaluation_score{index="kb-mine",metric="mrr@3",version="1"} 0.5' in text
    assert 'index="kb-theirs"' not in text
    prom.set_evaluation_scores({}, mine)
