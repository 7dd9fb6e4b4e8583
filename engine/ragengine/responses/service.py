"""Runs a Responses request: previous responses → file_search → context within the token budget →
the LLM's chat completions (JSON or relayed as Responses events) → citations → stored.

Generation goes through the configured LLM's ``/v1/chat/completions`` (``llm.client``), so vLLM needs
nothing new. The context is chosen as ``/v1/chat/completions`` chooses it (``chat.plan.plan_budget``,
``rag.context.select_context``: the similarity threshold, then the greedy fill of the budget), numbered by
file in the prompt, and the answer's citations come from ``citations.py``. With no LLM, or when every
endpoint fails, the answer is extractive (``extractive_fallback``), cited the same way.

A stream is opened upstream before the first event goes out, so an upstream refusal is still an HTTP
error (or the extractive answer); a failure after that is a ``response.failed`` event.

The output policy (``guardrails``, as on chat completions) screens the answer's text before its citations
are read (so their offsets are the screened text's), streamed deltas included, and the ``file_search``
query a reformulation wrote; the response (and the stored one) carries its ``guardrails`` field.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ragengine.access.acl import Acl
from ragengine.chat.plan import plan_budget, reply_max_tokens
from ragengine.errors import BadRequest
from ragengine.guardrails.answer import AnswerGuard
from ragengine.guardrails.runtime import Guardrails
from ragengine.llm.client import LLMClient, LLMUnavailable
from ragengine.llm.tokens import estimate_tokens
from ragengine.rag.context import select_context
from ragengine.rag.extractive import NO_ANSWER, extractive_answer
from ragengine.rag.reformulate import reformulate_query
from ragengine.responses import events as ev
from ragengine.responses.citations import CitationStripper, Source, citations
from ragengine.responses.plan import (
    Outcome,
    Plan,
    chat_messages,
    hit,
    message_item,
    new_id,
    number_sources,
    parse,
    prompt,
    query_of,
    response_object,
    search_call,
)
from ragengine.responses.store import ResponseStore
from ragengine.settings import EngineSettings
from ragengine.vectorstores.service import VectorStores

log = logging.getLogger(__name__)
NO_LLM = "No LLM is configured (RAGENGINE_LLM_URL is unset)."
EXTRACTIVE_MODEL = "ragengine-extractive"


@dataclass
class Prepared:
    """Everything decided before generation starts."""

    plan: Plan
    owner: str | None
    model: str
    payload: dict[str, Any]
    query: str
    nodes: list  # the chunks in the prompt
    sources: list[Source]
    output: list[dict] = field(default_factory=list)  # the file_search_call item, when a search ran
    out: AnswerGuard = field(default_factory=lambda: AnswerGuard(None))  # the answer through the output policy
    response_id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))


class ResponsesService:
    def __init__(self, settings: EngineSettings, llm: LLMClient, vector_stores: VectorStores, store: ResponseStore,
                 guardrails: Guardrails | None = None) -> None:
        self.settings = settings
        self.guardrails = guardrails  # the output policy (guardrails/runtime.py), or None
        self.llm = llm
        self.vector_stores = vector_stores
        self.store = store

    async def create(self, body: Any, owner: str | None, *, acl: Acl | None = None) -> dict | AsyncIterator[str]:
        """``owner``: whose stored responses the caller may continue (None: anyone's, an admin); ``acl``: the
        caller's document ACL, applied to every search (None sees every document)."""
        out = AnswerGuard(self.guardrails, "responses")  # fail-closed without a usable policy: 503 here
        prepared = await self._prepare(parse(body), owner, acl, out)
        if prepared.plan.request.stream:
            return await self._stream(prepared)
        outcome = await self._generate(prepared)
        item = message_item(new_id("msg"), outcome.text, outcome.annotations)
        response = self._response(prepared, [*prepared.output, item], "completed", outcome)
        await self._keep(prepared, response)
        return response

    # --- before generation ----------------------------------------------------------------------------
    async def _prepare(self, plan: Plan, owner: str | None, acl: Acl | None, out: AnswerGuard) -> Prepared:
        req = plan.request
        history = await self.store.history(req.previous_response_id, owner) if req.previous_response_id else []
        for store_id in plan.store_ids:  # 404 / expired before any work
            await self.vector_stores.usable(store_id)
        query = query_of(plan.items)
        candidates: list = []
        output: list[dict] = []
        if plan.search:
            query = await self._search_query(query, history)
            candidates = await self._search(plan, query, acl)
            results = [hit(n) for n in candidates] if plan.include_results else None
            output.append(search_call(new_id("fs"), out.scrub([query]), "completed", results))  # maybe the LLM's
        nodes, max_tokens = await self._context(plan, history, candidates)
        sources = number_sources(nodes)
        model = await self._model(req.model)
        payload: dict[str, Any] = {"messages": prompt(req.instructions, sources, history, plan.items)}
        if model != EXTRACTIVE_MODEL:
            payload["model"] = model
        for name, value in (("temperature", req.temperature), ("top_p", req.top_p), ("max_tokens", max_tokens),
                            ("user", req.user)):
            if value is not None:
                payload[name] = value
        return Prepared(plan, owner, model, payload, query, nodes, sources, output, out)

    async def _search_query(self, query: str, history: list[dict]) -> str:
        """A follow-up rewritten into a standalone question, when reformulation is on (the engine's setting)."""
        if not history or not self.settings.reformulate:
            return query
        result = await reformulate_query(self.llm, self.settings, query, chat_messages(history))
        return result.query

    async def _search(self, plan: Plan, query: str, acl: Acl | None) -> list:
        best: dict[str, Any] = {}
        for tool in plan.search:
            threshold = tool.ranking_options.score_threshold if tool.ranking_options else None
            for node in await self.vector_stores.retrieve(tool.vector_store_ids, [query], tool.max_num_results,
                                                          tool.filters, threshold or 0.0, acl=acl):
                if node.node_id not in best or best[node.node_id].score < node.score:
                    best[node.node_id] = node
        return sorted(best.values(), key=lambda n: n.score, reverse=True)

    async def _context(self, plan: Plan, history: list[dict], candidates: list) -> tuple[list, int | None]:
        """The chunks that go into the prompt (threshold, then what fits the budget) and the reply's max_tokens."""
        req = plan.request
        window = await self.llm.context_window()
        messages = prompt(req.instructions, [], history, plan.items)
        prompt_tokens = await self.llm.count_tokens(messages)
        query_tokens = await self.llm.count_tokens(query_of(plan.items))
        try:
            budget = plan_budget(window=window, prompt_tokens=prompt_tokens, query_tokens=query_tokens,
                                 max_tokens=req.max_output_tokens, ratio=self.settings.context_token_ratio,
                                 node_token_approximation=self.settings.node_token_approximation)
        except BadRequest as exc:
            raise BadRequest(f"{exc.message} ({prompt_tokens} tokens; the model's window is {window}).",
                             param="input") from None
        if not candidates:
            return [], reply_max_tokens(budget, 0)
        tools_threshold = [t.ranking_options.score_threshold for t in plan.search
                           if t.ranking_options and t.ranking_options.score_threshold is not None]
        threshold = min(tools_threshold) if tools_threshold else self.settings.similarity_threshold
        counted = await self.llm.count_chunk_tokens([n.text for n in candidates], [n.token_counts for n in candidates])
        counts = {n.text: c for n, c in zip(candidates, counted, strict=True)}
        nodes = select_context(candidates, budget.context_budget, counts.__getitem__, threshold)
        return nodes, reply_max_tokens(budget, sum(counts[n.text] for n in nodes))

    async def _model(self, requested: str | None) -> str:
        """The requested model when the LLM serves it; otherwise the served one (an app written for OpenAI
        names OpenAI's models)."""
        if not self.llm.configured:
            return EXTRACTIVE_MODEL
        if requested and requested in {m["id"] for m in await self.llm.list_models()}:
            return requested
        return await self.llm.model_name() or requested or "default"

    # --- generation -----------------------------------------------------------------------------------
    async def _generate(self, prepared: Prepared) -> Outcome:
        if not self.llm.configured:
            return self._extractive(prepared, NO_LLM)
        try:
            result = await self.llm.chat(prepared.payload)
        except LLMUnavailable as exc:
            return self._fallback(prepared, exc)
        choice = (result.body.get("choices") or [{}])[0]
        raw = (choice.get("message") or {}).get("content") or ""
        text = prepared.out.feed(raw) + prepared.out.close()
        usage = result.body.get("usage") or {}
        stripper = CitationStripper({s.number for s in prepared.sources})
        stripper.feed(text)
        stripper.finish()
        cited = citations(stripper, prepared.sources)
        return Outcome(stripper.text, cited.annotations, usage.get("prompt_tokens", 0),
                       usage.get("completion_tokens", 0), choice.get("finish_reason"))

    def _fallback(self, prepared: Prepared, exc: LLMUnavailable) -> Outcome:
        if not self.settings.extractive_fallback or not prepared.nodes:
            raise exc
        reason = exc.message if exc.status_code >= 500 else f"The LLM refused the request (HTTP {exc.status_code}): " \
                                                            f"{exc.message}"
        return self._extractive(prepared, reason)

    def _extractive(self, prepared: Prepared, reason: str) -> Outcome:
        if not prepared.nodes:
            raise LLMUnavailable(f"{NO_LLM} Without an LLM only file_search answers with context can be given.",
                                 status_code=503)
        log.info("answering extractively: %s", reason)
        text = extractive_answer(prepared.query, prepared.nodes) or NO_ANSWER
        text = prepared.out.feed(text) + prepared.out.close()
        stripper = CitationStripper(set())
        stripper.feed(text)
        stripper.finish()
        cited = citations(stripper, prepared.sources)
        tokens = estimate_tokens(text)
        return Outcome(stripper.text, cited.annotations, 0, tokens, "stop", extractive_reason=reason)

    def _response(self, prepared: Prepared, output: list[dict], status: str, outcome: Outcome | None = None,
                  error: dict | None = None) -> dict:
        body = response_object(prepared.plan, response_id=prepared.response_id, created_at=prepared.created_at,
                               model=prepared.model, output=output, status=status, outcome=outcome, error=error)
        if status != "in_progress" and prepared.out.report is not None:
            body["guardrails"] = prepared.out.report
        return body

    async def _keep(self, prepared: Prepared, response: dict) -> None:
        if prepared.plan.request.store:
            await self.store.save(response, prepared.plan.items, prepared.owner)

    # --- streaming --------------------------------------------------------------------------------------
    async def _stream(self, prepared: Prepared) -> AsyncIterator[str]:
        """Open upstream first (errors are still HTTP errors), then the events."""
        upstream = None
        fallback: Outcome | None = None
        if not self.llm.configured:
            fallback = self._extractive(prepared, NO_LLM)
        else:
            try:
                upstream = await self.llm.open_stream({**prepared.payload, "stream_options": {"include_usage": True}})
            except LLMUnavailable as exc:
                fallback = self._fallback(prepared, exc)
        return self._events(prepared, upstream, fallback)

    async def _events(self, prepared: Prepared, upstream: Any, fallback: Outcome | None) -> AsyncIterator[str]:
        emit = ev.EventWriter()
        started = self._response(prepared, [], "in_progress")
        yield emit("response.created", response=started)
        yield emit("response.in_progress", response=started)
        for index, call in enumerate(prepared.output):
            for event in ev.search_events(emit, call, index):
                yield event
        index = len(prepared.output)
        item_id = new_id("msg")
        for event in ev.message_start(emit, message_item(item_id, "", []), index):
            yield event
        stripper = CitationStripper({s.number for s in prepared.sources})
        outcome = fallback or Outcome()
        try:
            if fallback is not None:
                yield ev.text_delta(emit, item_id, index, fallback.text)
                stripper.feed(fallback.text)
            else:
                async for chunk in upstream:
                    for choice in chunk.get("choices") or []:
                        released = prepared.out.feed((choice.get("delta") or {}).get("content") or "")
                        shown = stripper.feed(released) if released else ""
                        if shown:
                            yield ev.text_delta(emit, item_id, index, shown)
                        outcome.finish_reason = choice.get("finish_reason") or outcome.finish_reason
                    usage = chunk.get("usage") or {}
                    outcome.input_tokens = usage.get("prompt_tokens", outcome.input_tokens)
                    outcome.output_tokens = usage.get("completion_tokens", outcome.output_tokens)
                    if prepared.out.stopped:  # blocked (or cut by a limit): stop reading the LLM
                        outcome.finish_reason = "content_filter" if prepared.out.blocked else "length"
                        break
                held = prepared.out.close()  # what the policy held back (or its block message)
                shown = stripper.feed(held) if held else ""
                if shown:
                    yield ev.text_delta(emit, item_id, index, shown)
            rest = stripper.finish()
            if rest:
                yield ev.text_delta(emit, item_id, index, rest)
        except Exception as exc:  # after the 200 went out, a failure can only be an event
            log.warning("response %s failed mid-stream: %s", prepared.response_id, exc)
            message = getattr(exc, "message", None) or f"{exc.__class__.__name__}: {exc}"
            partial = message_item(item_id, stripper.text, [], status="incomplete")
            failed = self._response(prepared, [*prepared.output, partial], "failed",
                                    error={"code": "server_error", "message": message})
            yield emit("response.failed", response=failed)
            return
        finally:
            if upstream is not None:
                await upstream.aclose()
        outcome.text = stripper.text
        outcome.annotations = citations(stripper, prepared.sources).annotations
        if not outcome.output_tokens:
            outcome.output_tokens = estimate_tokens(outcome.text)
        item = message_item(item_id, outcome.text, outcome.annotations)
        for event in ev.message_end(emit, item, index):
            yield event
        response = self._response(prepared, [*prepared.output, item], "completed", outcome)
        await self._keep(prepared, response)
        yield emit("response.completed", response=response)
