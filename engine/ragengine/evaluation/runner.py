"""Scoring one index version on a golden set: every question through the code ``POST /retrieve`` runs
(``registry.retrieve`` with the same arguments, the caller's document ACL included), against the one version
the run names, whatever goes live meanwhile.

Questions are asked one at a time, at full speed while no client request came for ``QUIET_S``; under client
traffic a run slows down to one question per ``BUSY_GAP_S``, each started between two requests (waiting
``YIELD_MAX_S`` at most for a gap, so a run always ends): the embedding model uses every core for one text, so
a run's question beside a serving query would delay it (docs/evaluation.md has /retrieve's latency during a
run). ``min_score`` drops results below it, as the chat's ``similarity_threshold`` drops context.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ragengine import metrics as prom
from ragengine.access.acl import Acl, acl_allows
from ragengine.evaluation import metrics as m
from ragengine.evaluation.answers import AnswerScorer

if TYPE_CHECKING:
    from ragengine.versions.registry import VersionedRegistry

MAX_SHOWN_MISSING = 50
QUIET_S = 0.2  # no client request for this long: the engine is idle, a run goes at full speed
BUSY_GAP_S = 1.0  # under client traffic, at most one question per this long
YIELD_MAX_S = 0.25  # the longest a question waits for a gap between two client requests
YIELD_POLL_S = 0.002


async def yield_to_serving(last_question_at: float) -> None:
    """Full speed when the engine is idle; else wait for the next slot, then (bounded) for a gap in traffic."""
    if prom.serving_quiet_for() >= QUIET_S:
        return
    await asyncio.sleep(max(0.0, last_question_at + BUSY_GAP_S - time.monotonic()))
    deadline = time.monotonic() + YIELD_MAX_S
    while prom.serving_in_flight() and time.monotonic() < deadline:
        await asyncio.sleep(YIELD_POLL_S)


async def retrieve(registry: VersionedRegistry, index: str, version: int, question: str, settings: dict,
                   acl: list[str] | None) -> list[Any]:
    """The nodes ``/retrieve`` returns for ``question`` on ``version``, in result order."""
    nodes = await registry.retrieve(index, question, settings["top_k"], version=version,
                                    filters=settings.get("filters"), metadata_filter=settings.get("metadata_filter"),
                                    max_chunks_per_document=settings.get("max_chunks_per_document"),
                                    long_query_windows=settings.get("long_query_windows"),
                                    acl=None if acl is None else Acl(tuple(acl)))
    floor = settings.get("min_score")
    return [n for n in nodes if floor is None or n.score >= floor]


async def score(registry: VersionedRegistry, index: str, version: int, questions: list[dict], settings: dict,
                acl: list[str] | None, progress: Callable[[int], Awaitable[None]],
                answers: AnswerScorer | None = None) -> tuple[dict, dict]:
    """(metrics, results) of ``version`` on ``questions``; ``progress(done)`` after each question."""
    k = settings["top_k"]
    items, scores = [], []
    asked_at = 0.0
    for done, q in enumerate(questions, start=1):
        await yield_to_serving(asked_at)
        asked_at = time.monotonic()
        nodes = await retrieve(registry, index, version, q["question"], settings, acl)
        ranked = [n.doc_id for n in nodes]
        one = m.score_question(ranked, q["relevant_doc_ids"], k)
        scores.append(one)
        item = {"id": q["id"], **{key: round(v, 6) if isinstance(v, float) else v for key, v in one.items()},
                "retrieved_doc_ids": ranked}
        if answers is not None:
            item["answer"] = await answers.add(q, [(n.text, n.score) for n in nodes])
        items.append(item)
        await progress(done)
    missing = await missing_documents(registry, index, version, questions, acl)
    results = {"items": items, "missing": missing}
    if answers is not None:
        results["answers"] = answers.summary()
    return m.aggregate(scores, k), results


async def missing_documents(registry: VersionedRegistry, index: str, version: int, questions: list[dict],
                            acl: list[str] | None) -> dict:
    """Relevant doc ids the version does not hold, and those it holds but the reader's ACL hides: counted,
    so a set that names the wrong ids reads as such, not as a silent zero."""
    wanted = sorted({d for q in questions for d in q["relevant_doc_ids"]})
    held: dict[str, dict] = {}
    for i in range(0, len(wanted), 500):
        held.update(await registry.present(index, version, wanted[i:i + 500]))
    absent = [d for d in wanted if d not in held]
    hidden = [d for d in wanted if d in held and acl is not None and not acl_allows(held[d], tuple(acl))]
    gone, unseen = set(absent), set(hidden)
    return {"count": len(absent), "doc_ids": absent[:MAX_SHOWN_MISSING],
            "questions_affected": sum(1 for q in questions if gone & set(q["relevant_doc_ids"])),
            "questions_without_any": sum(1 for q in questions if set(q["relevant_doc_ids"]) <= gone | unseen),
            "hidden_by_acl": len(hidden), "hidden_doc_ids": hidden[:MAX_SHOWN_MISSING],
            "relevant_doc_ids": len(wanted)}
