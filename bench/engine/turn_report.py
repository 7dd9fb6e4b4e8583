"""The chat-turn profile's table: each stage's own time (median over the turns), from turn_profile's records.

A row is a label and an expression over the records' inclusive stage times: ``a - b - c`` takes a stage
and removes the stages nested in it, so each middleware shows its own time and "rest" rows show what no
wrapper names (the framework, thread hops, locks). Stages that overlap in time (BM25 runs while the query is
embedded; the prompt is counted while retrieval runs) are shown inclusive and marked so.
"""

from __future__ import annotations

import statistics
from typing import Any

# (label, expression, indent). Names are turn_profile.STAGES' stages, plus "asgi", "cpu" and "client".
ROWS: list[tuple[str, str, int]] = [
    ("client round trip (one client, keep-alive)", "client", 0),
    ("outside the app: loopback, uvicorn's HTTP parsing, the client", "client - asgi", 1),
    ("inside the app (ASGI)", "asgi", 1),
    ("Starlette's outer error middleware, app entry", "asgi - mw.drain", 2),
    ("middleware: drain (Connection: close)", "mw.drain - mw.request_context", 2),
    ("middleware: request id, access log, trace context", "mw.request_context - mw.metrics", 2),
    ("middleware: request metrics", "mw.metrics - mw.body_limit", 2),
    ("middleware: body limit", "mw.body_limit - mw.authentication", 2),
    ("middleware: authentication (access check)", "mw.authentication - mw.exceptions", 2),
    ("routing, FastAPI request and dependency handling", "mw.exceptions - dep.check_names - dep.hold - dep.authorize"
     " - read_json - chat.create - response.render", 2),
    ("dependency: names checked", "dep.check_names", 2),
    ("dependency: stand-by hold", "dep.hold", 2),
    ("dependency: authorize (rule, index, limits)", "dep.authorize", 2),
    ("body read + JSON parse", "read_json", 2),
    ("chat service (chat.create)", "chat.create", 2),
    ("output policy check (fail-closed gate)", "guardrails.for_answer", 3),
    ("request validation (pydantic)", "parse_request", 3),
    ("plan: target, bypass rules, message split", "plan.resolve_target + plan.bypass_reason + plan.split_messages", 3),
    ("reformulation decision", "reformulation", 3),
    ("token budget + retrieval (run together)", "budget_and_retrieve", 3),
    ("context window", "llm.context_window", 4),
    ("token counts: prompt and query (overlaps retrieval)", "tokens.count", 4),
    ("of which /tokenize round trips", "tokens.remote", 5),
    ("retrieval", "retrieve", 4),
    ("query embedding", "retrieval.embedding", 5),
    ("keyword search, BM25 (beside the embedding)", "retrieval.bm25", 5),
    ("dense search, FAISS", "retrieval.dense", 5),
    ("fusion and result nodes", "retrieval.fusion", 5),
    ("rest: thread hops, locks, the index's lookups", "retrieve - retrieval.embedding - retrieval.dense - retrieval.fusion",
     5),
    ("input screening", "screening", 3),
    ("context selection", "select", 3),
    ("chunk token counts", "select.chunk_counts", 4),
    ("greedy fill", "select.greedy", 4),
    ("prompt building", "prompt", 3),
    ("LLM call (loopback + the stub)", "llm.chat", 3),
    ("response building (sources, rag info)", "generate - llm.chat - metrics.json", 3),
    ("metrics and Server-Timing", "metrics.json", 3),
    ("output guardrails", "guardrails.output", 3),
    ("rest of the chat service", "chat.create - guardrails.for_answer - parse_request - plan.resolve_target"
     " - plan.bypass_reason - plan.split_messages - reformulation - budget_and_retrieve - screening - select - prompt"
     " - generate - guardrails.output", 3),
    ("JSON response render", "response.render", 2),
    ("engine process CPU per turn (all threads)", "cpu", 0),
]


def evaluate(expression: str, record: dict[str, float]) -> float:
    """``a - b + c`` over ``record`` (a stage missing from it counts 0)."""
    total, sign = 0.0, 1.0
    for token in expression.split():
        if token in "+-":
            sign = 1.0 if token == "+" else -1.0
        else:
            total += sign * record.get(token, 0.0)
    return total


def rows(records: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Per row: its label, indent and median in milliseconds over ``records``."""
    out = []
    for label, expression, indent in ROWS:
        values = [evaluate(expression, r) * 1000 for r in records]
        out.append({"label": label, "indent": indent, "p50_ms": round(statistics.median(values), 3) if values else None})
    return out


def print_table(now: list[dict[str, Any]], before: list[dict[str, Any]] | None, title: str) -> None:
    previous = {r["label"]: r["p50_ms"] for r in before or []}
    print(f"\n{title}")
    print(f"{'stage (p50 per turn, ms; indented rows are part of the row above)':<78} {'now':>8} {'previous':>9}")
    for row in now:
        label = "  " * row["indent"] + row["label"]
        old = previous.get(row["label"])
        print(f"{label:<78} {fmt(row['p50_ms']):>8} {fmt(old):>9}")


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
