"""Answer metrics of a run with ``answers: true``: each question answered by the LLM from the version's own
retrieved chunks (the chat's prompt layout, ``chat.plan.build_messages``, over the chunks at or above the
similarity threshold), then scored three ways:

- **groundedness**: the engine's own check (``rag.groundedness``: lexical and embedding support of each
  answer sentence by the context), deterministic, no judge;
- **relevance** (does it answer the question?) and **agreement** with ``reference_answer`` (where one is
  given): an LLM judge, on a 1-5 scale mapped to 0-1, with a fixed prompt whose version
  (``PROMPT_VERSION``) is recorded with the scores, as is the judge's model.

No LLM reachable (or it fails during the run): the retrieval metrics stand, and the answer metrics say
``unavailable`` with the reason. A judge reply that is not the JSON asked for counts as unscored (and is
counted), never as a zero.

The answer a run keeps (and shows, per question) went through the engine's output policy, as a chat answer
does (issue 41: every text the model wrote that the engine shows); it is scored as the model wrote it. A
fail-closed policy that cannot screen makes the answer metrics ``unavailable`` before the LLM is asked.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from ragengine.chat.plan import build_messages
from ragengine.errors import EngineError, UpstreamError
from ragengine.guardrails.answer import AnswerGuard
from ragengine.guardrails.runtime import Guardrails
from ragengine.rag.groundedness import assess_groundedness
from ragengine.settings import EngineSettings

if TYPE_CHECKING:
    from ragengine.embedding.core import Embedder
    from ragengine.llm.client import LLMClient

PROMPT_VERSION = "ragengine-judge/1"
MAX_CONTEXT_CHARS = 12_000
ANSWER_MAX_TOKENS = 512
JUDGE_PROMPT = (
    "You grade an answer given by a retrieval-augmented assistant. Reply with one JSON object and nothing else:\n"
    '{{"relevance": <1-5: how directly and completely the answer addresses the question>, '
    '"agreement": <1-5: how well the answer agrees with the reference answer, or null when there is none>}}\n\n'
    "Question:\n{question}\n\nAnswer:\n{answer}\n\nReference answer:\n{reference}\n"
)
_JSON = re.compile(r"\{.*\}", re.S)


def context_of(texts_scores: list[tuple[str, float]], threshold: float) -> list[str]:
    """The chunks that go into the prompt: at or above the threshold, best first, within MAX_CONTEXT_CHARS."""
    out, used = [], 0
    for text, score in texts_scores:
        if score < threshold or used + len(text) > MAX_CONTEXT_CHARS:
            continue
        out.append(text)
        used += len(text)
    return out


def parse_judgement(content: str) -> dict[str, float | None] | None:
    """The judge's 1-5 grades as 0-1 scores; None when the reply is not the JSON asked for."""
    found = _JSON.search(content or "")
    try:
        data = json.loads(found.group(0)) if found else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    out: dict[str, float | None] = {}
    for key in ("relevance", "agreement"):
        value = data.get(key)
        if value is None:
            out[key] = None
        elif isinstance(value, int | float) and not isinstance(value, bool) and 1 <= value <= 5:
            out[key] = (float(value) - 1.0) / 4.0
        else:
            return None
    return out


class AnswerScorer:
    """Answers and scores questions one at a time; after the first LLM failure it stops and says why."""

    def __init__(self, llm: LLMClient | None, embedder: Embedder, settings: EngineSettings,
                 guardrails: Guardrails | None = None) -> None:
        self.llm, self.embedder, self.settings, self.guardrails = llm, embedder, settings, guardrails
        self.unavailable: str | None = None if llm is not None and llm.configured else (
            "no LLM is configured (RAGENGINE_LLM_URL)")
        self.model: str | None = None
        self.rows: list[dict] = []
        self.unparsed = 0

    async def add(self, question: dict, texts_scores: list[tuple[str, float]]) -> dict | None:
        if self.unavailable is not None:
            return None
        contexts = context_of(texts_scores, self.settings.similarity_threshold)
        try:
            out = AnswerGuard(self.guardrails, "evaluations")  # fail-closed without a usable policy: raises here
        except EngineError as exc:
            self.unavailable = f"the output policy cannot screen answers: {exc.message}"[:500]
            return None
        try:
            assert self.llm is not None, "unavailable says so without an LLM"
            self.model = self.model or await self.llm.model_name()
            answer = await self._complete(build_messages([], question["question"], contexts), ANSWER_MAX_TOKENS)
            prompt = JUDGE_PROMPT.format(question=question["question"], answer=answer,
                                         reference=question.get("reference_answer") or "(none)")
            verdict = parse_judgement(await self._complete([{"role": "user", "content": prompt}], 64))
        except UpstreamError as exc:
            self.unavailable = f"the LLM failed: {exc.message}"[:500]
            return None
        report = await assess_groundedness(answer, contexts, threshold=self.settings.groundedness_threshold,
                                           embedder=self.embedder)
        if verdict is None:
            self.unparsed += 1
        if verdict is not None and not question.get("reference_answer"):
            verdict["agreement"] = None
        try:
            out.feed(answer)
            out.close()
        except EngineError as exc:  # fail-closed, and the scan failed: no unscreened answer is kept
            self.unavailable = f"the output policy could not screen an answer: {exc.message}"[:500]
            return None
        row = {"groundedness": report.score, "relevance": verdict and verdict["relevance"],
               "agreement": verdict and verdict["agreement"], "answer": out.shown[:2000]}
        self.rows.append(row)
        return row

    async def _complete(self, messages: list[dict], max_tokens: int) -> str:
        payload = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
        if self.model:
            payload["model"] = self.model
        assert self.llm is not None, "add() answers nothing without an LLM"
        result = await self.llm.chat(payload)
        choices = result.body.get("choices") if isinstance(result.body, dict) else None
        message = (choices[0].get("message") or {}) if choices and isinstance(choices[0], dict) else {}
        return str(message.get("content") or "")

    def summary(self) -> dict:
        judge = {"model": self.model, "prompt_version": PROMPT_VERSION, "groundedness": "rag.groundedness"}
        if self.unavailable is not None:
            return {"status": "unavailable", "reason": self.unavailable, "judge": judge, "answered": len(self.rows)}

        def mean(key: str) -> float | None:
            values = [r[key] for r in self.rows if r[key] is not None]
            return round(sum(values) / len(values), 6) if values else None

        return {"status": "ok", "judge": judge, "answered": len(self.rows), "unparsed_judgements": self.unparsed,
                "groundedness": mean("groundedness"), "relevance": mean("relevance"), "agreement": mean("agreement"),
                "scored": {k: sum(1 for r in self.rows if r[k] is not None)
                           for k in ("groundedness", "relevance", "agreement")}}
