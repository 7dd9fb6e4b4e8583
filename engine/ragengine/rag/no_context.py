"""What a client sees when retrieval was asked for and no chunk passed the similarity threshold.

Pure: no I/O. The setting ``no_context`` (CR ``retrieval.noContext``) picks one of:

- ``answer``: the LLM answers the question as sent (the seed's behaviour, the default);
- ``refuse``: the fixed ``REFUSAL``; the LLM is not asked;
- ``disclaim``: the LLM's answer, then a blank line and ``DISCLAIMER`` (as sessions do for low groundedness).

Chat completions carry the outcome in the ``X-RAG-Outcome`` header too (``applied``, ``no_context``, or the
bypass reason such as ``no_index_name``), so a client can tell without parsing the ``rag`` extension.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

OUTCOME_HEADER = "X-RAG-Outcome"
NO_CONTEXT = "no_context"
REFUSAL = "I could not find anything in the documents that answers this question."
DISCLAIMER = "Note: no document matched this question, so this answer is not based on the documents."
REFUSAL_METHOD = "no_context_refusal"


def disclaimed(text: str | None) -> str:
    """``text`` followed by the disclaimer (after a blank line when there is text)."""
    return f"{text}\n\n{DISCLAIMER}" if text else DISCLAIMER


def disclaim_body(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion's JSON with the disclaimer after every choice's text (tool calls without text are left)."""
    for choice in body.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and not message.get("tool_calls"):
            message["content"] = disclaimed(message.get("content"))
    return body


async def disclaim_chunks(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """Upstream stream chunks with a disclaimer delta for each choice just before its ``finish_reason``, so the
    disclaimer is the last text clients accumulate and ``finish_reason`` stays last. A chunk that carries both
    the last text and ``finish_reason`` is split around the disclaimer; tool-call choices are left alone."""
    tool_choices: set[int] = set()
    async for item in chunks:
        base = {k: v for k, v in item.items() if k not in ("choices", "usage")}
        before: list[dict[str, Any]] = []
        choices = []
        for choice in item.get("choices") or []:
            index = choice.get("index", 0)
            delta = choice.get("delta") or {}
            if delta.get("tool_calls"):
                tool_choices.add(index)
            if choice.get("finish_reason") is not None and index not in tool_choices:
                if delta:  # its last text goes out first, then the disclaimer, then the finish
                    before.append({**base, "choices": [{**choice, "finish_reason": None}]})
                    choice = {**choice, "delta": {}}
                piece = {"index": index, "delta": {"content": "\n\n" + DISCLAIMER}, "finish_reason": None}
                before.append({**base, "choices": [piece]})
            choices.append(choice)
        for extra in before:
            yield extra
        if "choices" in item:
            item["choices"] = choices
        yield item
