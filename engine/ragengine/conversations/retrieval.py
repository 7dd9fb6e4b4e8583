"""What a session message retrieves in the RAG mode: the session's own files (scoped, as the tool
loop searches them) and its knowledge index, if it names one, merged on one cosine scale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragengine.conversations.tools import Scope, scoped_search
from ragengine.guardrails.screening import screen_nodes
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.index.api import IndexAPI


async def session_search(registry: IndexAPI, settings: EngineSettings, session: Any, scope: Scope, query: str, top_k: int,
                         meta: dict | None = None) -> list:
    """The session's files (scoped) plus its knowledge index (if any), best similarity first."""
    found = list(await scoped_search(registry, scope, query, top_k))
    knowledge = session.index_name
    if knowledge == settings.conversation_index:  # a session stored before that was refused
        knowledge = None
    owner = {id(n): scope.index_name for n in found}
    if knowledge and registry.exists(knowledge):
        more = await registry.retrieve(knowledge, query, top_k, acl=scope.acl)
        owner.update((id(n), knowledge) for n in more)
        found += more
    elif knowledge and meta is not None:
        meta["index_missing"] = knowledge  # created later, or deleted: not an error
    found, screening = screen_nodes(found, None, settings.screen_indexes, index_of=lambda n: owner[id(n)])
    if screening is not None and meta is not None:
        meta["screening"] = screening
    found.sort(key=lambda n: n.score, reverse=True)  # the seed's order; two lists merge on one cosine scale
    return found[:top_k]
