"""The guardrails' Prometheus series (in the engine's registry, beside ragengine.metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from ragengine.metrics import REGISTRY

ANSWERS = Counter(
    "ragengine_guardrails_answers_total", "Answers (choices) through the output policy, by endpoint and outcome "
    "(allow, redact, block, error: the scan failed, unavailable: no policy could be loaded).",
    ["endpoint", "action"], registry=REGISTRY,
)
SCANNER_ACTIONS = Counter(
    "ragengine_guardrails_scanner_actions_total", "Times a scanner acted on an answer (matches redacted, or the "
    "block), by scanner type, action and endpoint.",
    ["scanner", "action", "endpoint"], registry=REGISTRY,
)
SCAN_SECONDS = Histogram(
    "ragengine_guardrails_scan_seconds", "CPU time the output policy spent on one answer (all its deltas), by "
    "endpoint and mode (json, stream).",
    ["endpoint", "mode"], buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                   0.25, 0.5, 1), registry=REGISTRY,
)
POLICY_RELOADS = Counter(
    "ragengine_guardrails_policy_reloads_total", "Policy file loads by outcome (ok, error: the previous policy "
    "stays in force).", ["outcome"], registry=REGISTRY,
)
POLICY_ERROR = Gauge(
    "ragengine_guardrails_policy_error", "1 while the policy file on disk cannot be used (the last good one serves).",
    registry=REGISTRY,
)
POLICY_SCANNERS = Gauge(
    "ragengine_guardrails_policy_scanners", "Scanners of the policy in force (skipped entries not counted).",
    registry=REGISTRY,
)
POLICY_WARNINGS = Gauge(
    "ragengine_guardrails_policy_warnings", "Entries of the policy in force that were skipped or corrected.",
    registry=REGISTRY,
)
SCREENED_CHUNKS = Counter(
    "ragengine_guardrails_screened_chunks_total", "Retrieved chunks screened before the prompt, by outcome (clean, "
    "stripped: invisible/control characters removed, quarantined: kept out of the prompt) and reason.",
    ["outcome", "reason"], registry=REGISTRY,
)
