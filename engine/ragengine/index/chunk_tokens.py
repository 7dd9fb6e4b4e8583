"""Token counts stored with the chunks at ingestion, so the chat budget need not count them again.

The count that matters is the served LLM's (the context budget is in its tokens), not the embedding
model's: the chunker's counts are in the wrong tokenizer. So a count is stored under the identity of the
tokenizer that made it (``TokenCounter.identity``: counting source and served model) and used only while
that identity is current; a chunk counted by another model, or never counted, is counted at request time.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class ChunkTokenCounter(Protocol):
    """What ingestion needs of the LLM's token counter (``ragengine.llm.tokens.TokenCounter``)."""

    async def exact_counts(self, texts: list[str]) -> tuple[str, list[int]] | None: ...


async def counts_to_store(counter: ChunkTokenCounter | None, texts: list[str]) -> tuple[str, list[int]] | None:
    """(identity, one count per text), or None when no LLM is configured or it cannot count exactly now.
    Best effort: ingestion never fails because the LLM's tokenizer is unavailable."""
    if counter is None or not texts:
        return None
    try:
        return await counter.exact_counts(texts)
    except Exception as exc:
        log.warning("token counts not stored with the chunks (counted at request time instead): %s", exc)
        return None


def per_document(counted: tuple[str, list[int]] | None, sizes: list[int]) -> list[dict[str, list[int]] | None]:
    """Counts cut into one ``{identity: [count per chunk]}`` per document (``sizes``: its chunk count)."""
    if counted is None:
        return [None] * len(sizes)
    identity, counts = counted
    out: list[dict[str, list[int]] | None] = []
    pos = 0
    for n in sizes:
        out.append({identity: counts[pos:pos + n]})
        pos += n
    return out
