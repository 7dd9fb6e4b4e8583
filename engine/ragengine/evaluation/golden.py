"""Golden sets: checking one (the refusals a client sees), reading one from JSON Lines, and the fingerprint
that says two runs scored the same set the same way. Pure.

A set is a list of questions ``{"id", "question", "relevant_doc_ids": [...], "reference_answer"?}``
(``protocol.evaluations.GoldenQuestion``). Refused, before anything is stored: an empty set, a repeated
id, more questions than the engine's limit (``evaluation_max_questions``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from pydantic import ValidationError

from ragengine.errors import BadRequest, PayloadTooLarge
from ragengine.protocol.evaluations import GoldenQuestion, RetrievalSettings
from ragengine.validation import validation_message

SETTINGS_KEYS = ("top_k", "filters", "metadata_filter", "max_chunks_per_document", "long_query_windows", "min_score")


def check(questions: list[GoldenQuestion], max_questions: int, param: str = "questions") -> list[dict]:
    """The set as plain dicts, or the 4xx that says what is wrong with it."""
    if not questions:
        raise BadRequest("The golden set is empty: give at least one question.", param=param)
    if len(questions) > max_questions:
        raise PayloadTooLarge(f"The golden set has {len(questions)} questions; at most {max_questions} are "
                              "scored in one run (evaluation_max_questions): split it.")
    blank = [q.id for q in questions if not q.question.strip()]
    if blank:
        raise BadRequest(f"Question {blank[0]!r} is blank: every question needs words.", param=param)
    repeated = sorted(i for i, n in Counter(q.id for q in questions).items() if n > 1)
    if repeated:
        shown = ", ".join(repr(i) for i in repeated[:5])
        raise BadRequest(f"Question ids must be unique in a golden set: {shown} appear more than once.", param=param)
    return [q.model_dump(exclude_none=True) for q in questions]


def parse_jsonl(text: str, max_questions: int) -> list[dict]:
    """A golden set in JSON Lines (one question object per line; blank lines and ``#`` comments skipped)."""
    questions: list[GoldenQuestion] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(questions) > max_questions:
            break  # check() says how many is too many
        try:
            questions.append(GoldenQuestion.model_validate(json.loads(line)))
        except ValueError as exc:  # JSONDecodeError and ValidationError are both ValueErrors
            why = validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
            raise BadRequest(f"line {number} of the golden set: {why}") from None
    return check(questions, max_questions)


def retrieval_settings(settings: RetrievalSettings | dict) -> dict[str, Any]:
    """The settings a run records (every key, unset ones as None, so equal settings compare equal)."""
    data = settings.model_dump() if isinstance(settings, RetrievalSettings) else dict(settings)
    return {k: data.get(k) for k in SETTINGS_KEYS}


def fingerprint(questions: list[dict], settings: dict, acl: list[str] | None) -> str:
    """Same questions, same settings, same reader (document ACL): runs whose scores may be compared."""
    canonical = json.dumps({"q": questions, "s": retrieval_settings(settings), "acl": acl}, sort_keys=True,
                           ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
