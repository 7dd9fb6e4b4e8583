"""``ragengine eval``: score an index on a golden set through a running engine's API, print a table, and exit
non-zero when a gate given on the command line fails, so CI pipelines can use it (docs/evaluation.md).

    ragengine eval --index handbook --golden golden.jsonl --metric mrr@10 --minimum 0.6
    ragengine eval --index handbook --compare eval_a eval_b --metric mrr@10 --max-regression 0.02

Exit status: 0 done (and every gate passed), 1 an error (the engine refused, the run failed), 2 bad usage,
3 a gate failed. The key comes from ``--api-key`` or ``RAGENGINE_API_KEY`` (a write role on the index).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from ragengine.evaluation import gate as gates
from ragengine.evaluation import golden
from ragengine.evaluation import metrics as m

GATE_FAILED = 3


def _client(url: str, api_key: str | None, timeout: float):
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)


def _checked(resp: Any, what: str) -> Any:
    if resp.status_code >= 400:
        try:
            body = resp.json()
            detail = body.get("detail") or (body.get("error") or {}).get("message") or resp.text
        except ValueError:
            detail = resp.text
        raise click.ClickException(f"{what} answered {resp.status_code}: {str(detail)[:800]}")
    return resp.json()


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _wait(client: Any, index: str, run_id: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    shown = -1
    while True:
        run = _checked(client.get(f"/indexes/{index}/evaluations/{run_id}"), "GET evaluation")
        if run["status"] not in ("queued", "running"):
            return run
        done = run["progress"]["done"]
        if done != shown and sys.stderr.isatty():
            click.echo(f"\r{run['status']}: {done} of {run['progress']['total']} questions", nl=False, err=True)
            shown = done
        if time.monotonic() > deadline:
            raise click.ClickException(f"evaluation {run_id} still {run['status']} after {timeout_s:.0f} s")
        time.sleep(0.5)


def _print_run(run: dict) -> None:
    click.echo(f"evaluation {run['id']}: index {run['index']} version {run['version']}, {run['status']}")
    rows = [("metric", "score")] + [(k, f"{v:.4f}") for k, v in sorted((run.get("metrics") or {}).items())]
    click.echo(_table(rows))
    missing = run.get("missing_doc_ids") or {}
    if missing.get("count") or missing.get("hidden_by_acl"):
        click.echo(f"relevant doc ids absent from the index: {missing['count']} of {missing['relevant_doc_ids']} "
                   f"({', '.join(missing['doc_ids'][:10])}); hidden by your ACL: {missing['hidden_by_acl']}")
    answers = run.get("answer_metrics")
    if answers:
        if answers.get("status") != "ok":
            click.echo(f"answer metrics unavailable: {answers.get('reason')}")
        else:
            click.echo("answers: " + ", ".join(f"{k} {answers[k]:.4f}" for k in ("groundedness", "relevance", "agreement")
                                                if answers.get(k) is not None)
                       + f" (judge {answers['judge']['model']}, {answers['judge']['prompt_version']})")


def _print_comparison(cmp: dict) -> None:
    click.echo(f"{cmp['other']['id']} (version {cmp['other']['version']}) against {cmp['base']['id']} "
               f"(version {cmp['base']['version']})")
    base, other = cmp["base"]["metrics"] or {}, cmp["other"]["metrics"] or {}
    rows = [("metric", "base", "other", "delta")] + [(k, f"{base[k]:.4f}", f"{other[k]:.4f}", f"{v:+.4f}")
                                                     for k, v in sorted(cmp["deltas"].items())]
    click.echo(_table(rows))
    click.echo(f"questions better: {len(cmp['better'])}, worse: {len(cmp['worse'])}, unchanged: {cmp['unchanged']}")
    for label, items in (("worse", cmp["worse"]), ("better", cmp["better"])):
        for q in items[:10]:
            click.echo(f"  {label}: {q['id']} rank {q['base_rank']} -> {q['other_rank']}")


@click.command("eval")
@click.option("--index", "index", required=True, help="The index to score.")
@click.option("--golden", "golden_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="The golden set, JSON Lines: {id, question, relevant_doc_ids, reference_answer?} per line.")
@click.option("--compare", nargs=2, metavar="BASE OTHER", default=None, help="Compare two finished runs instead.")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The engine's base URL.")
@click.option("--api-key", envvar="RAGENGINE_API_KEY", default=None, help="Bearer token (write role on the index).")
@click.option("--top-k", type=int, default=10, show_default=True, help="Results per question (the metrics' k).")
@click.option("--version", "version", type=int, default=None, help="Score this version (default: the live one).")
@click.option("--answers", is_flag=True, help="Also score LLM answers (groundedness, relevance, agreement).")
@click.option("--metric", default=None, help="Gate: the metric, e.g. mrr@10 (its k must be --top-k).")
@click.option("--minimum", type=float, default=None, help="Gate: fail when the metric is below this.")
@click.option("--max-regression", type=float, default=None,
              help="Gate: fail when the metric is more than this below the baseline run's (--baseline, or BASE).")
@click.option("--baseline", default=None, help="Gate: the run to compare a --golden run with.")
@click.option("--json", "as_json", is_flag=True, help="Print the run (or comparison) as JSON.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds to wait for the run.")
def eval_command(index: str, golden_file: Path | None, compare: tuple[str, str] | None, url: str,
                 api_key: str | None, top_k: int, version: int | None, answers: bool, metric: str | None,
                 minimum: float | None, max_regression: float | None, baseline: str | None, as_json: bool,
                 timeout: float) -> None:
    """Score INDEX on a golden set (or compare two runs) and print a table; exit 3 when a gate fails."""
    if (golden_file is None) == (compare is None):
        raise click.UsageError("give exactly one of --golden FILE or --compare BASE OTHER")
    if (minimum is not None or max_regression is not None) and metric is None:
        raise click.UsageError("--minimum and --max-regression need --metric")
    if metric is not None:
        try:
            m.metric_name(metric)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--metric") from None
    with _client(url, api_key, 120.0) as client:
        if compare is not None:
            cmp = _checked(client.get(f"/indexes/{index}/evaluations/{compare[0]}/compare/{compare[1]}"), "compare")
            click.echo(json.dumps(cmp, indent=2)) if as_json else _print_comparison(cmp)
            scores, base_scores, version_of = cmp["other"]["metrics"] or {}, cmp["base"]["metrics"] or {}, cmp["other"]
        else:
            assert golden_file is not None
            try:
                questions = golden.parse_jsonl(golden_file.read_text(encoding="utf-8"), max_questions=10**6)
            except Exception as exc:  # the engine's own words (BadRequest), read here before anything is sent
                raise click.ClickException(f"{golden_file}: {getattr(exc, 'message', exc)}") from None
            body = {"questions": questions, "top_k": top_k, "answers": answers,
                    **({"version": version} if version is not None else {})}
            started = _checked(client.post(f"/indexes/{index}/evaluations", json=body), "POST evaluation")
            run = _wait(client, index, started["id"], timeout)
            if sys.stderr.isatty():
                click.echo("", err=True)
            click.echo(json.dumps(run, indent=2)) if as_json else _print_run(run)
            if run["status"] != "succeeded":
                raise click.ClickException(f"evaluation {run['id']} {run['status']}: {run.get('error')}")
            scores, base_scores, version_of = run["metrics"] or {}, {}, run
            if baseline is not None:
                base = _checked(client.get(f"/indexes/{index}/evaluations/{baseline}"), "GET baseline")
                base_scores = base["metrics"] or {}
    if metric is None:
        return
    key = metric.strip().lower()
    if key not in scores:
        raise click.ClickException(f"the run has no {key} (it has {', '.join(sorted(scores))}): use --top-k to match")
    if max_regression is not None and key not in base_scores:
        raise click.UsageError("--max-regression needs a baseline: --baseline RUN, or --compare BASE OTHER")
    verdict = gates.decide(key, scores[key], base_scores.get(key) if max_regression is not None else None, minimum,
                           max_regression, version=version_of.get("version") or 0, live=0)
    click.echo(("PASS: " if verdict.passed else "FAIL: ") + verdict.message.split(": ", 1)[1].replace(
        "live version 0's", "the baseline's").replace("(live version 0:", "(baseline:"))
    if not verdict.passed:
        sys.exit(GATE_FAILED)
