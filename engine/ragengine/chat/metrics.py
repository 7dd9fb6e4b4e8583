"""Time-to-first-token observations for chat (the metric objects live in ``ragengine.metrics``).

``rag_ttft_seconds``: request received → first token (the whole answer when not streaming) sent to
the client. ``llm_ttft_seconds``: LLM request sent → first chunk (whole response) back. Their
difference is the engine's own overhead.
"""

from __future__ import annotations

from ragengine.metrics import LLM_TTFT_SECONDS, RAG_TTFT_SECONDS


def _observe(metric, seconds: float, **labels: str) -> None:
    # Labels are used when the metric declares them (mode / endpoint); the shared ones have none.
    if getattr(metric, "_labelnames", ()):
        metric.labels(**labels).observe(seconds)
    else:
        metric.observe(seconds)


def observe_rag_ttft(seconds: float, mode: str) -> None:
    _observe(RAG_TTFT_SECONDS, seconds, mode=mode)


def observe_llm_ttft(seconds: float, endpoint: str) -> None:
    _observe(LLM_TTFT_SECONDS, seconds, endpoint=endpoint)
