"""The policy ConfigMap's text -> the GuardrailsPolicy condition. Pure: the text is read by kube/observe.py.

The operator parses ``guardrails.yaml`` with the engine's own parser (``ragengine.guardrails.policy``:
pure, yaml and re only), so the condition says exactly what the engine will do with the file:
- True ``PolicyLoaded``: every scanner is usable;
- True ``PolicyLoadedWithWarnings``: KAITO's permissive parsing skipped something (an unknown scanner
  type, an invalid scanner config, an unknown action); the message lists each, the rest still runs;
- False ``PolicyInvalid``: not YAML, or not a mapping. The engine refuses the file and keeps its last good
  policy; with none (a bad file at start) fail-closed refuses answers (503) and fail-open answers
  unscreened. GitOps tools see it through Degraded (status.py);
- False ``PolicyNotFound``: the ConfigMap or its ``guardrails.yaml`` key is missing.
Absent when ``spec.guardrails.enabled`` is false.
"""

from __future__ import annotations

from typing import Any

from ragengine.guardrails.policy import PolicyError, parse_policy

from .. import constants as c
from ..manifests.guardrails import POLICY_KEY
from ..spec import RAGEngineSpec

MAX_MESSAGE = 1024  # a condition message is for a person: the first warnings, then a count


def _cond(status: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": c.GUARDRAILS_POLICY, "status": "True" if status else "False", "reason": reason,
            "message": message[:MAX_MESSAGE]}


def guardrails_condition(spec: RAGEngineSpec, configmap: str, text: str | None) -> dict[str, Any] | None:
    """``text``: the ConfigMap's ``guardrails.yaml`` (None: no such ConfigMap or key)."""
    if not spec.guardrails.enabled:
        return None
    where = f"ConfigMap {configmap} key {POLICY_KEY}"
    if text is None:
        return _cond(False, "PolicyNotFound", f"{where} does not exist")
    without = ("fail-open: answers go out unscreened" if spec.guardrails.fail_open
               else "fail-closed: answers are refused with 503")
    try:
        policy = parse_policy(text)
    except PolicyError as exc:
        return _cond(False, "PolicyInvalid", f"{where}: {exc}. The engine keeps its last good policy; an engine "
                     f"that never had one is {without}")
    kinds = ", ".join(s.type for s in policy.scanners) or "none"
    summary = f"{where}: {len(policy.scanners)} scanners ({kinds}), default action {policy.action}"
    if policy.warnings:
        shown = "; ".join(policy.warnings[:5]) + (f"; and {len(policy.warnings) - 5} more" if len(policy.warnings) > 5 else "")
        return _cond(True, "PolicyLoadedWithWarnings", f"{summary}; skipped: {shown}")
    return _cond(True, "PolicyLoaded", summary)
