"""Prometheus metrics of the conversation features, on the engine's registry (``ragengine.metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from ragengine.metrics import REGISTRY

GROUNDEDNESS_SCORE = Histogram(
    "ragengine_groundedness_score", "Groundedness score of RAG answers in session messages (0 = unsupported).",
    ["mode"], buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), registry=REGISTRY,
)
UNGROUNDED_ANSWERS = Counter(
    "ragengine_ungrounded_answers_total", "Answers flagged as below the groundedness threshold.", ["mode"],
    registry=REGISTRY,
)
SESSION_MESSAGES = Counter(
    "ragengine_session_messages_total", "Session messages answered, by mode and generation method.",
    ["mode", "generation_method"], registry=REGISTRY,
)
REFORMULATIONS = Counter(
    "ragengine_reformulations_total", "Reformulation requests by outcome (rewritten, unchanged, skipped, failed).",
    ["outcome"], registry=REGISTRY,
)
REFORMULATE_SECONDS = Histogram(
    "ragengine_reformulate_seconds", "Time spent in the LLM rewriting a follow-up question.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY,
)
TOOL_CALLS = Counter("ragengine_tool_calls_total", "semantic_search tool calls executed (scoped).", registry=REGISTRY)
FILES_INGESTED = Counter(
    "ragengine_conversation_files_total", "Uploaded files by final ingestion status.", ["status"], registry=REGISTRY,
)


def record_reformulation(result) -> None:
    if result.reformulated:
        outcome = "rewritten"
    elif result.reason and result.reason.startswith("LLM failed"):
        outcome = "failed"
    elif result.endpoint:
        outcome = "unchanged"
    else:
        outcome = "skipped"
    REFORMULATIONS.labels(outcome).inc()
    if result.endpoint:
        REFORMULATE_SECONDS.observe(result.latency_ms / 1000)
