"""``rewrite_query`` of a vector store search: the question rewritten into a search query by the LLM.

Fail-open like query reformulation (``rag.reformulate``): without an LLM, when it fails, or when its
output is unusable (empty, several lines, far longer than the question), the query is used as sent. The
query the search ran is what ``search_query`` reports.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ragengine.errors import UpstreamError

if TYPE_CHECKING:
    from ragengine.llm.client import LLMClient

log = logging.getLogger(__name__)

PROMPT = ("Rewrite the user's question as a short search query for a document search engine: keep the names, "
          "numbers and key terms, drop filler words. Do not answer it. Return only the query.")
MAX_TOKENS = 64


def usable(original: str, rewritten: str) -> str | None:
    """The rewrite when it can stand in for the query, else None. Pure."""
    text = rewritten.strip().strip('"').strip()
    if not text or "\n" in text or len(text) > max(200, 3 * len(original)):
        return None
    return text


async def rewrite_for_search(llm: LLMClient, query: str) -> str:
    if llm is None or not llm.configured:
        return query
    payload: dict[str, Any] = {"messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": query}],
                               "max_tokens": MAX_TOKENS, "temperature": 0}
    model = await llm.model_name()
    if model:
        payload["model"] = model
    try:
        result = await llm.chat(payload)
        content = result.body["choices"][0]["message"]["content"] or ""
    except (UpstreamError, KeyError, IndexError, TypeError) as exc:
        log.info("search query not rewritten: %s", exc)
        return query
    return usable(query, content) or query
