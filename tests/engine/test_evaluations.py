"""Evaluations over HTTP on a real engine (FAISS, the packaged model, SQLite runs): the scores are exactly
what a client computes from its own /retrieve calls with the same settings; bad sets are refused and store
nothing; a run sees what its principal sees; it scores the version it names; a restart marks a cut-off run."""

from __future__ import annotations

import json
import math
import time

import httpx
import pytest

pytestmark = pytest.mark.stores("faiss")

DOCS = [
    ("solar", "Solar panels convert sunlight into electricity; batteries store the energy for the night.", "energy"),
    ("bread", "Sourdough bread needs a starter culture, long fermentation and a hot oven.", "food"),
    ("hike", "Mountain hiking trails are marked with painted stripes; carry water and a map.", "outdoor"),
    ("tax", "Freelancers file tax returns every spring and may deduct home office costs.", "money"),
    ("k8s", "Kubernetes schedules containers onto nodes and restarts pods that fail.", "tech"),
    ("reef", "Coral reefs host fish and algae; warm water bleaches the coral.", "outdoor"),
]
QUESTIONS = [
    {"id": "q1", "question": "How do solar panels charge batteries?", "relevant_doc_ids": ["solar"]},
    {"id": "q2", "question": "What does a sourdough starter do?", "relevant_doc_ids": ["bread"]},
    {"id": "q3", "question": "Who restarts failed pods?", "relevant_doc_ids": ["k8s", "ghost"]},  # ghost: no such doc
    {"id": "q4", "question": "Why does coral bleach?", "relevant_doc_ids": ["tax"]},  # a wrong judgement: a miss
]


def _index(base: str, headers: dict | None = None, acl: dict | None = None) -> None:
    docs = [{"doc_id": d, "text": t, "metadata": {"topic": topic, **({"acl": acl[d]} if acl and d in acl else {})}}
            for d, t, topic in DOCS]
    resp = httpx.post(f"{base}/index", json={"index_name": "kb", "documents": docs}, headers=headers, timeout=120)
    assert resp.status_code == 200, resp.text


def _run(base: str, body: dict, headers: dict | None = None, status: int = 202) -> dict:
    resp = httpx.post(f"{base}/indexes/kb/evaluations", json=body, headers=headers, timeout=60)
    assert resp.status_code == status, resp.text
    if status != 202:
        return resp.json()
    run_id = resp.json()["id"]
    assert resp.json()["status"] in ("queued", "running")
    deadline = time.monotonic() + 120
    while True:
        got = httpx.get(f"{base}/indexes/kb/evaluations/{run_id}", headers=headers, timeout=30).json()
        if got["status"] not in ("queued", "running"):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.1)


def client_scores(base: str, questions: list[dict], k: int, extra: dict | None = None,
                  headers: dict | None = None) -> tuple[dict, list[list[str]]]:
    """What a client computes from /retrieve, written out here (not the engine's module): each document at
    the rank of its best chunk; MRR, recall, binary nDCG and hit rate at k, averaged over questions."""
    sums = {"mrr": 0.0, "recall": 0.0, "ndcg": 0.0, "hit_rate": 0.0}
    rankings = []
    for q in questions:
        body = {"index_name": "kb", "query": q["question"], "max_node_count": k, **(extra or {})}
        resp = httpx.post(f"{base}/retrieve", json=body, headers=headers, timeout=60)
        assert resp.status_code == 200, resp.text
        ranked = [r["doc_id"] for r in resp.json()["results"]]
        rankings.append(ranked)
        first: dict[str, int] = {}
        for pos, doc in enumerate(ranked[:k], start=1):
            if doc in q["relevant_doc_ids"]:
                first.setdefault(doc, pos)
        rel = set(q["relevant_doc_ids"])
        sums["mrr"] += 1 / min(first.values()) if first else 0.0
        sums["recall"] += len(first) / len(rel)
        ideal = sum(1 / math.log2(r + 1) for r in range(1, min(len(rel), k) + 1))
        sums["ndcg"] += sum(1 / math.log2(r + 1) for r in first.values()) / ideal
        sums["hit_rate"] += 1.0 if first else 0.0
    return {f"{name}@{k}": value / len(questions) for name, value in sums.items()}, rankings


def test_scores_equal_a_clients_own_computation_from_retrieve(make_server):
    with make_server() as (base, _app):
        _index(base)
        run = _run(base, {"questions": QUESTIONS, "top_k": 3})
        assert run["status"] == "succeeded" and run["version"] == 1 and run["progress"] == {"done": 4, "total": 4}
        mine, rankings = client_scores(base, QUESTIONS, 3)
        assert run["metrics"] == {k: pytest.approx(v, abs=1e-6) for k, v in mine.items()}
        # Literal values: q1-q3 find a relevant document first, q4's judgement names a document never retrieved;
        # q3 finds one of its two relevant documents (the other does not exist): nDCG 1 / (1 + 1/log2 3).
        assert run["metrics"] == {"mrr@3": 0.75, "recall@3": 0.625, "hit_rate@3": 0.75,
                                  "ndcg@3": pytest.approx((1 + 1 + 1 / (1 + 1 / math.log2(3))) / 4, abs=1e-6)}
        assert [r["retrieved_doc_ids"] for r in run["results"]] == rankings
        assert [r["first_relevant_rank"] for r in run["results"]] == [1, 1, 1, None]
        assert run["missing_doc_ids"]["count"] == 1 and run["missing_doc_ids"]["doc_ids"] == ["ghost"]
        assert run["missing_doc_ids"]["questions_affected"] == 1

        # The same with /retrieve's filters and a score threshold: the run is still what the client gets.
        settings = {"filters": {"type": "ne", "key": "topic", "value": "energy"}, "min_score": 0.2}
        filtered = _run(base, {"questions": QUESTIONS, "top_k": 3, **settings})
        assert filtered["settings"]["filters"] == settings["filters"] and filtered["settings"]["min_score"] == 0.2
        mine, rankings = client_scores(base, QUESTIONS, 3, {"filters": settings["filters"]})
        results = httpx.post(f"{base}/retrieve", json={"index_name": "kb", "query": QUESTIONS[1]["question"],
                                                       "max_node_count": 3, "filters": settings["filters"]}).json()
        kept = [r["doc_id"] for r in results["results"] if r["score"] >= 0.2]
        assert filtered["results"][1]["retrieved_doc_ids"] == kept
        assert filtered["results"][0]["mrr"] == 0.0  # solar is filtered out
        assert filtered["metrics"]["mrr@3"] == pytest.approx(0.5)

        listed = httpx.get(f"{base}/indexes/kb/evaluations").json()["data"]
        assert [r["id"] for r in listed] == [filtered["id"], run["id"]]
        cmp = httpx.get(f"{base}/indexes/kb/evaluations/{run['id']}/compare/{filtered['id']}").json()
        assert cmp["deltas"]["mrr@3"] == pytest.approx(-0.25)
        assert [w["id"] for w in cmp["worse"]] == ["q1"] and cmp["better"] == [] and cmp["unchanged"] == 3

        health = httpx.get(f"{base}/health").json()["evaluation"]["indexes"]["kb"]
        assert health["id"] == filtered["id"] and health["previous"]["id"] == run["id"]
        text = httpx.get(f"{base}/metrics").text
        assert 'ragengine_evaluation_score{index="kb",metric="mrr@3",version="1"} 0.5' in text


def test_bad_sets_are_refused_and_store_nothing(make_server):
    with make_server(evaluation_max_questions=3) as (base, _app):
        _index(base)
        cases = [
            ({"questions": []}, 400, "empty"),
            ({"questions": [QUESTIONS[0], QUESTIONS[1], QUESTIONS[0]]}, 400, "'q1' appear more than once"),
            ({"questions": QUESTIONS}, 413, "4 questions; at most 3"),
            ({"questions": QUESTIONS[:1], "version": 7}, 404, "no version 7"),
            ({"questions": QUESTIONS[:1], "top_k": 301}, 400, "top_k must be between 1 and 300"),
            ({"questions": [{"id": "x", "question": "q", "relevant_doc_ids": []}]}, 422, "relevant_doc_ids"),
            ({"questions": [{"id": "x", "question": "  ", "relevant_doc_ids": ["a"]}]}, 400, "'x' is blank"),
            ({"questions": QUESTIONS[:1], "filters": {"type": "near", "key": "a", "value": 1}}, 400, "near"),
        ]
        for body, status, words in cases:
            got = _run(base, body, status=status)
            assert words in json.dumps(got), (body, got)
        assert httpx.post(f"{base}/indexes/nope/evaluations", json={"questions": QUESTIONS[:1]}).status_code == 404
        assert httpx.get(f"{base}/indexes/kb/evaluations").json()["data"] == []
        assert httpx.get(f"{base}/indexes/kb/evaluations/eval_missing").status_code == 404


def test_a_run_sees_what_its_principal_sees(make_server, tmp_path):
    access = tmp_path / "access.yaml"
    access.write_text(json.dumps({"keys": [
        {"name": "admin", "key": "admin-key-0123456789", "indexes": ["*"], "role": "admin"},
        {"name": "team", "key": "team-key-0123456789", "indexes": ["kb"], "role": "write", "groups": ["team"]},
        {"name": "other", "key": "other-key-0123456789", "indexes": ["kb"], "role": "write"},
        {"name": "reader", "key": "reader-key-0123456789", "indexes": ["kb"], "role": "read"}]}))
    admin, team = {"Authorization": "Bearer admin-key-0123456789"}, {"Authorization": "Bearer team-key-0123456789"}
    with make_server(access_file=access) as (base, _app):
        _index(base, admin, acl={"solar": ["group:finance"], "k8s": ["group:team"]})
        as_team = _run(base, {"questions": QUESTIONS, "top_k": 3}, team)
        as_admin = _run(base, {"questions": QUESTIONS, "top_k": 3}, admin)
        assert as_team["results"][0]["mrr"] == 0.0 and "solar" not in as_team["results"][0]["retrieved_doc_ids"]
        assert as_admin["results"][0]["mrr"] == 1.0
        assert as_team["missing_doc_ids"]["hidden_by_acl"] == 1 and as_team["missing_doc_ids"]["hidden_doc_ids"] == ["solar"]
        mine, _ = client_scores(base, QUESTIONS, 3, headers=team)
        assert as_team["metrics"] == {k: pytest.approx(v, abs=1e-6) for k, v in mine.items()}
        # A run is its creator's: others get the 404 of a missing run; an admin sees every run.
        other = {"Authorization": "Bearer other-key-0123456789"}
        assert httpx.get(f"{base}/indexes/kb/evaluations/{as_team['id']}", headers=other).status_code == 404
        assert httpx.get(f"{base}/indexes/kb/evaluations", headers=other).json()["data"] == []
        assert httpx.get(f"{base}/indexes/kb/evaluations/{as_team['id']}", headers=admin).status_code == 200
        assert httpx.get(f"{base}/indexes/kb/evaluations/{as_admin['id']}/compare/{as_team['id']}",
                         headers=team).status_code == 404
        reader = {"Authorization": "Bearer reader-key-0123456789"}
        assert httpx.post(f"{base}/indexes/kb/evaluations", json={"questions": QUESTIONS},
                          headers=reader).status_code == 403


def test_a_run_scores_the_version_it_names_and_a_restart_marks_a_cut_off_run(make_server):
    with make_server(index_versions_kept=2) as (base, _app):
        _index(base)
        v1 = _run(base, {"questions": QUESTIONS, "top_k": 3})
        resp = httpx.post(f"{base}/indexes/kb/reindex", json={"embedding_model": "wordllama:l2_supercat"}, timeout=120)
        assert resp.status_code == 202, resp.text
        from tests.support.versions import wait_job

        assert wait_job(base, "kb")["live_version"] == 2
        again = _run(base, {"questions": QUESTIONS, "top_k": 3, "version": 1})
        assert again["version"] == 1 and again["results"] == v1["results"]
        live = _run(base, {"questions": QUESTIONS, "top_k": 3})
        assert live["version"] == 2
        mine, rankings = client_scores(base, QUESTIONS, 3)
        assert [r["retrieved_doc_ids"] for r in live["results"]] == rankings
        assert live["metrics"] == {k: pytest.approx(v, abs=1e-6) for k, v in mine.items()}
        # A long run cut off by a shutdown (its task cancelled, its row left running).
        many = [{"id": f"m{i}", "question": f"question number {i} about solar panels", "relevant_doc_ids": ["solar"]}
                for i in range(1000)]
        started = httpx.post(f"{base}/indexes/kb/evaluations", json={"questions": many}).json()
    with make_server() as (base, _app):
        cut = httpx.get(f"{base}/indexes/kb/evaluations/{started['id']}").json()
        assert cut["status"] == "interrupted" and "restarted" in cut["error"], cut
        assert httpx.get(f"{base}/indexes/kb/evaluations/{v1['id']}").json()["metrics"] == v1["metrics"]


def test_the_cli_prints_a_table_compares_and_fails_a_gate(make_server, tmp_path):
    from click.testing import CliRunner

    from ragengine.cli import main

    golden = tmp_path / "golden.jsonl"
    golden.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n")
    with make_server() as (base, _app):
        _index(base)
        cli = CliRunner()
        ok = cli.invoke(main, ["eval", "--index", "kb", "--golden", str(golden), "--url", base, "--top-k", "3",
                               "--metric", "mrr@3", "--minimum", "0.7"])
        assert ok.exit_code == 0, ok.output
        assert "mrr@3       0.7500" in ok.output and "hit_rate@3  0.7500" in ok.output
        assert "absent from the index: 1 of 5 (ghost)" in ok.output and "PASS: mrr@3 0.7500" in ok.output
        failed = cli.invoke(main, ["eval", "--index", "kb", "--golden", str(golden), "--url", base, "--top-k", "3",
                                   "--metric", "mrr@3", "--minimum", "0.8"])
        assert failed.exit_code == 3 and "FAIL: mrr@3 0.7500 is below the minimum 0.8000" in failed.output
        first, second = [r["id"] for r in httpx.get(f"{base}/indexes/kb/evaluations").json()["data"]][::-1]
        cmp = cli.invoke(main, ["eval", "--index", "kb", "--compare", first, second, "--url", base,
                                "--metric", "mrr@3", "--max-regression", "0"])
        assert cmp.exit_code == 0 and "+0.0000" in cmp.output and "unchanged: 4" in cmp.output, cmp.output
        golden.write_text('{"id": "a", "question": "q", "relevant_doc_ids": ["x"]}\n{"id": "a", "question": "r", '
                          '"relevant_doc_ids": ["y"]}\n')
        bad = cli.invoke(main, ["eval", "--index", "kb", "--golden", str(golden), "--url", base])
        assert bad.exit_code == 1 and "'a' appear more than once" in bad.output
        usage = cli.invoke(main, ["eval", "--index", "kb", "--url", base])
        assert usage.exit_code == 2 and "exactly one of --golden" in usage.output


def test_answer_metrics_with_a_judge_and_without_an_llm(make_server):
    from tests.llm_server import FakeLLM, create_llm_app
    from tests.support.server import refused_port, serve_app

    def reply(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        if prompt.startswith("You grade an answer"):  # the judge: relevance 5, agreement 3 (or none)
            return '{"relevance": 5, "agreement": 3}' if "Reference answer:\n(none)" not in prompt else \
                '{"relevance": 4, "agreement": null}'
        context = body["messages"][0]["content"].split("--------------------\n")[1]
        return context.split("\n\n")[0].strip()  # the answer: the best chunk, word for word (fully grounded)

    llm = FakeLLM(model="judge-model", reply=reply, split=lambda text: [text])  # verbatim, not re-spaced
    questions = [{**QUESTIONS[0], "reference_answer": "Panels make electricity that batteries store."}, QUESTIONS[1]]
    with serve_app(create_llm_app(llm)) as llm_base, make_server(llm_url=f"{llm_base}/v1") as (base, _app):
        _index(base)
        run = _run(base, {"questions": questions, "top_k": 3, "answers": True})
        answers = run["answer_metrics"]
        assert answers["status"] == "ok" and answers["judge"] == {
            "model": "judge-model", "prompt_version": "ragengine-judge/1", "groundedness": "rag.groundedness"}
        assert answers["relevance"] == pytest.approx((1.0 + 0.75) / 2) and answers["agreement"] == 0.5
        assert answers["scored"] == {"groundedness": 2, "relevance": 2, "agreement": 1}
        assert answers["groundedness"] > 0.9
        assert run["results"][0]["answer"]["answer"].startswith("Solar panels convert sunlight")
        assert run["metrics"]["mrr@3"] == 1.0
        asked = [b["messages"][-1]["content"] for b in llm.chat_requests()]
        assert asked[0] == questions[0]["question"] and asked[1].startswith("You grade an answer")

    with refused_port() as port, make_server(llm_url=f"http://127.0.0.1:{port}/v1", llm_retries=0) as (base, _app):
        _index(base)
        run = _run(base, {"questions": questions, "top_k": 3, "answers": True})
        assert run["status"] == "succeeded" and run["metrics"]["mrr@3"] == 1.0
        assert run["answer_metrics"]["status"] == "unavailable"
        assert "the LLM failed" in run["answer_metrics"]["reason"] and "cannot connect" in run["answer_metrics"]["reason"]
    with make_server() as (base, _app):
        _index(base)
        run = _run(base, {"questions": questions, "top_k": 3, "answers": True})
        assert run["answer_metrics"] == {"status": "unavailable", "reason": "no LLM is configured (RAGENGINE_LLM_URL)",
                                         "judge": {"model": None, "prompt_version": "ragengine-judge/1",
                                                   "groundedness": "rag.groundedness"}, "answered": 0}


def test_runs_in_a_postgresql_sessions_database(make_server, pgvector_url):
    """The same runs with the sessions' database on PostgreSQL (what replicas share)."""
    with make_server(database_url=pgvector_url) as (base, _app):
        _index(base)
        first = _run(base, {"questions": QUESTIONS, "top_k": 3})
        second = _run(base, {"questions": QUESTIONS[:2], "top_k": 3})
        assert first["metrics"]["mrr@3"] == 0.75 and second["metrics"]["mrr@3"] == 1.0
        listed = httpx.get(f"{base}/indexes/kb/evaluations").json()["data"]
        assert [r["id"] for r in listed][:2] == [second["id"], first["id"]]
        cmp = httpx.get(f"{base}/indexes/kb/evaluations/{first['id']}/compare/{second['id']}").json()
        assert cmp["only_in_base"] == ["q3", "q4"] and cmp["unchanged"] == 2
