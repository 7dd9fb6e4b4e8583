"""Runs a chat plan: validate → (bypass | retrieve → select context → LLM) → response or SSE events.

Returns values (``JSONOutcome`` / ``StreamOutcome``) and raises domain errors; the router only picks
``JSONResponse`` or ``StreamingResponse``. Streams are opened before the router answers, so an upstream
4xx or an unreachable LLM still gets its own HTTP status (or the extractive fallback) instead of a 200
followed by an error event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from pydantic import ValidationError

from ragengine.access.acl import Acl
from ragengine.chat.plan import (
    MIN_TOP_K,
    MessageSplit,
    Target,
    TokenBudget,
    build_messages,
    bypass_reason,
    plan_budget,
    reply_max_tokens,
    resolve_target,
    split_messages,
)
from ragengine.chat.stream import chunk, extractive_stream, relay
from ragengine.chat.turn import JSONOutcome, Selection, StreamOutcome, Turn
from ragengine.errors import BadRequest, NotFound
from ragengine.guardrails.output import guard_chat
from ragengine.guardrails.runtime import Guardrails
from ragengine.guardrails.screening import screen_nodes
from ragengine.llm.client import LLMClient, LLMUnavailable
from ragengine.llm.tokens import estimate_tokens
from ragengine.metrics import CONTEXT_CHUNKS, LLM_FALLBACKS, LLM_TTFT_SECONDS, RAG_TTFT_SECONDS
from ragengine.observability import tracing
from ragengine.protocol.openai import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    Choice,
    RagInfo,
    Usage,
    new_completion_id,
)
from ragengine.rag.context import select_context
from ragengine.rag.extractive import NO_ANSWER, extractive_answer
from ragengine.rag.no_context import (
    NO_CONTEXT,
    OUTCOME_HEADER,
    REFUSAL,
    REFUSAL_METHOD,
    disclaim_body,
    disclaim_chunks,
    disclaimed,
)
from ragengine.rag.reformulate import ReformulationResult, reformulate_query
from ragengine.settings import EngineSettings
from ragengine.validation import validation_message, validation_param

log = logging.getLogger(__name__)
NO_LLM = "No LLM is configured (RAGENGINE_LLM_URL is unset)."
EXTRACTIVE_MODEL = "ragengine-extractive"


def parse_request(body: Any) -> ChatCompletionRequest:
    if not isinstance(body, dict):
        raise BadRequest("Invalid request format: the body must be a JSON object.")
    try:
        req = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise BadRequest(f"Invalid request format: {validation_message(exc)}", param=validation_param(exc)) from None
    if not req.messages:
        raise BadRequest("Invalid request format: 'messages' must be a non-empty list.", param="messages")
    return req


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


class ChatService:
    def __init__(self, settings: EngineSettings, llm: LLMClient, registry: Any, guardrails: Guardrails | None = None
                 ) -> None:
        self.settings = settings
        self.llm = llm
        self.registry = registry
        self.guardrails = guardrails

    async def create(self, req: ChatCompletionRequest, *, received: float | None = None, acl: Acl | None = None
                     ) -> JSONOutcome | StreamOutcome:
        """The answer, through the output policy (guardrails/output.py) when one is configured. ``acl``: the
        caller's document ACL (access.decide.document_acl); None sees every document."""
        if self.guardrails is not None:
            self.guardrails.for_answer()  # fail-closed without a usable policy: 503 before the LLM is asked
        outcome = await self._answer(req, received, acl)
        return guard_chat(self.guardrails, outcome, n=req.n or 1)

    async def _answer(self, req: ChatCompletionRequest, received: float | None, acl: Acl | None
                      ) -> JSONOutcome | StreamOutcome:
        t0 = received if received is not None else time.perf_counter()
        target = dataclasses.replace(resolve_target(req, self.settings.context_token_ratio), acl=acl)
        if target.index_name is not None and (self.registry is None or not self.registry.exists(target.index_name)):
            raise NotFound(f"No such index: '{target.index_name}' exists.", param="index_name")
        reason = bypass_reason(req, target.index_name)
        tracing.annotate(**{"chat.index": target.index_name, "chat.stream": bool(req.stream),
                            "chat.bypass": reason, "gen_ai.request.model": req.model})
        turn = Turn(req, target, t0, RagInfo(applied=False, reason=reason), outcome=reason)
        outcome = await (self._passthrough(turn) if reason is not None else self._rag(turn))
        outcome.headers[OUTCOME_HEADER] = turn.outcome or "applied"
        return outcome

    # --- RAG: query → budget and retrieval → context selection → generation ------------------------
    async def _rag(self, turn: Turn) -> JSONOutcome | StreamOutcome:
        req, target = turn.req, turn.target
        split = split_messages(req.messages)
        query, reformulation = await self._query(req, split)
        messages = req.messages
        if reformulation is not None and reformulation.reformulated and self.settings.reformulated_query_to_llm:
            # The seed: the LLM answers the standalone question (the client keeps its own words).
            split = MessageSplit(user_prompt=query, history=split.history)
            messages = [*split.history, {"role": "user", "content": query}]
        budget, nodes, turn.timing = await self._budget_and_retrieve(req, target, split, query, messages)
        nodes, screening = screen_nodes(nodes, target.index_name, self.settings.screen_indexes)
        chosen = await self._select(nodes, budget, turn.timing)
        CONTEXT_CHUNKS.observe(len(chosen.nodes))
        max_tokens = reply_max_tokens(budget, chosen.context_tokens)
        turn.info = RagInfo(
            applied=bool(chosen.nodes), reason=None if chosen.nodes else "no_context", index_name=target.index_name,
            top_k=budget.top_k, retrieved=len(nodes), selected=len(chosen.nodes), context_tokens=chosen.context_tokens,
            context_budget=budget.context_budget, prompt_tokens=budget.prompt_tokens, max_tokens=max_tokens,
            max_tokens_requested=budget.max_tokens_requested, token_counter=self.llm.tokens.method,
            query_used=query, reformulation=reformulation.to_dict() if reformulation else None, screening=screening,
        )
        if not chosen.nodes:
            turn.outcome = NO_CONTEXT
            return await self._no_context(turn, chosen)
        if not self.llm.configured:
            return self._extractive(turn, chosen.nodes, NO_LLM)
        payload = await self._rag_payload(turn, split, chosen.nodes, max_tokens)
        return await self._generate(turn, payload, chosen.nodes)

    async def _no_context(self, turn: Turn, chosen: Selection) -> JSONOutcome | StreamOutcome:
        """Nothing passed the threshold: the ``no_context`` setting's answer (rag/no_context.py)."""
        policy = turn.info.no_context = self.settings.no_context
        if policy == "refuse":
            return self._canned(turn, REFUSAL, None, method=REFUSAL_METHOD, mode="refused")
        # The seed: nothing relevant fits → the request goes to the LLM as sent.
        return await self._passthrough(turn, fallback_nodes=chosen.candidates[:5], disclaim=policy == "disclaim")

    async def _query(self, req: ChatCompletionRequest, split: MessageSplit) -> tuple[str, ReformulationResult | None]:
        """The retrieval query: the user's prompt, or its standalone rewrite when reformulation is on (a
        follow-up such as "which of those is quickest?" becomes a question that retrieval can match)."""
        if not (req.reformulate if req.reformulate is not None else self.settings.reformulate):
            return split.user_prompt, None
        reformulation = await reformulate_query(self.llm, self.settings, split.user_prompt, split.history)
        return reformulation.query, reformulation

    async def _budget_and_retrieve(self, req: ChatCompletionRequest, target: Target, split: MessageSplit,
                                   query: str, messages: list[dict]) -> tuple[TokenBudget, list, dict[str, float]]:
        """The token budget of ``messages`` (what goes upstream) and the retrieved nodes. When ``top_k``
        cannot depend on the prompt's length (small windows), the search runs while the tokens are counted."""
        window = await self.llm.context_window()
        t_retrieve = time.perf_counter()
        retrieval = None
        if window / self.settings.node_token_approximation <= MIN_TOP_K:
            retrieval = asyncio.ensure_future(self._retrieve(req, target, query, MIN_TOP_K))
            retrieval.add_done_callback(lambda t: t.cancelled() or t.exception())  # never "never retrieved"
        t_count = time.perf_counter()
        try:
            prompt_tokens, query_tokens = await asyncio.gather(
                self.llm.count_tokens(messages), self.llm.count_tokens(split.user_prompt)
            )
            budget = plan_budget(
                window=window, prompt_tokens=prompt_tokens, query_tokens=query_tokens,
                max_tokens=req.max_completion_tokens or req.max_tokens, ratio=target.ratio,
                node_token_approximation=self.settings.node_token_approximation,
            )
        except BaseException:
            if retrieval is not None:
                retrieval.cancel()
            raise
        count_s = time.perf_counter() - t_count
        if retrieval is None or budget.top_k != MIN_TOP_K:
            if retrieval is not None:
                retrieval.cancel()
            t_retrieve = time.perf_counter()
            retrieval = asyncio.ensure_future(self._retrieve(req, target, query, budget.top_k))
        nodes = await retrieval
        return budget, nodes, {"tokens": count_s, "retrieve": time.perf_counter() - t_retrieve}

    async def _select(self, nodes: list, budget: TokenBudget, timing: dict[str, float]) -> Selection:
        """Nodes above the similarity threshold, then the greedy fill of the context budget."""
        t_select = time.perf_counter()
        threshold = self.settings.similarity_threshold
        with tracing.stage("context_selection", retrieved=len(nodes), similarity_threshold=threshold,
                           context_budget=budget.context_budget) as span:
            candidates = [n for n in nodes if (n.score or 0.0) >= threshold] if threshold else list(nodes)
            # Counts stored with the chunks at ingestion are used as they are; only the others are counted.
            counted = await self.llm.count_chunk_tokens([n.text for n in candidates],
                                                        [n.token_counts for n in candidates])
            counts = {n.text: c for n, c in zip(candidates, counted, strict=True)}
            selected = select_context(candidates, budget.context_budget, counts.__getitem__, threshold)
            chosen = Selection(candidates, selected, sum(counts[n.text] for n in selected))
            tracing.annotate(span, candidates=len(candidates), selected=len(selected), context_tokens=chosen.context_tokens,
                             doc_ids=[n.doc_id for n in selected[:20]])
        timing["select"] = time.perf_counter() - t_select
        return chosen

    async def _rag_payload(self, turn: Turn, split: MessageSplit, selected: list, max_tokens: int | None
                           ) -> dict[str, Any]:
        """The upstream request: the caller's with the context in the system message, the served model's
        name, and ``max_tokens`` lowered to what is left of the window."""
        payload = turn.req.upstream()
        payload["messages"] = build_messages(split.history, split.user_prompt, [n.text for n in selected])
        payload["model"] = turn.target.model or await self.llm.model_name()
        if payload["model"] is None:
            del payload["model"]
        if max_tokens is not None:
            for name in ("max_tokens", "max_completion_tokens"):
                if getattr(turn.req, name) is not None:
                    payload[name] = max_tokens
        return payload

    async def _generate(self, turn: Turn, payload: dict[str, Any], selected: list) -> JSONOutcome | StreamOutcome:
        """The LLM's answer (JSON or relayed stream) with the sources; extractive when every endpoint fails."""
        sources = [n.to_source_node() for n in selected]
        completion_id = new_completion_id()
        if turn.req.stream:
            try:
                stream = await self.llm.open_stream(payload)
            except LLMUnavailable as exc:
                return self._fallback(turn, exc, selected)
            turn.info.endpoint = stream.endpoint
            model = payload.get("model") or ""
            final = chunk(completion_id, model, int(time.time()), [], source_nodes=sources,
                          generation_method="llm", rag=turn.info.model_dump(exclude_none=True))
            return StreamOutcome(relay(
                stream.__aiter__(), completion_id=completion_id, final=lambda: final,
                on_first=self._first_token_observer(turn.t0, stream, "rag"), on_close=stream.aclose,
            ))
        try:
            result = await self.llm.chat(payload)
        except LLMUnavailable as exc:
            return self._fallback(turn, exc, selected)
        turn.info.endpoint = result.endpoint
        out = result.body if isinstance(result.body, dict) else {"response": result.body}
        out.update(id=completion_id, source_nodes=sources, generation_method="llm",
                   rag=turn.info.model_dump(exclude_none=True))
        return self._json(turn, out, "rag", llm_s=result.elapsed_s, endpoint=result.endpoint)

    async def _retrieve(self, req: ChatCompletionRequest, target: Target, query: str, top_k: int) -> list:
        scoped = {k: v for k, v in (("filters", req.filters), ("metadata_filter", req.metadata_filter)) if v is not None}
        return await self.registry.retrieve(target.index_name, query, top_k, acl=target.acl, **scoped)

    # --- pass-through -----------------------------------------------------------------------------
    async def _passthrough(self, turn: Turn, *, fallback_nodes: list | None = None, disclaim: bool = False
                           ) -> JSONOutcome | StreamOutcome:
        """The caller's request to the LLM as sent (a bypass, or no context); ``fallback_nodes``: what the
        extractive answer may use when the LLM is out of reach (None: the error is the answer)."""
        if not self.llm.configured:
            if fallback_nodes is not None:
                return self._extractive(turn, fallback_nodes, NO_LLM, disclaim=disclaim)
            raise LLMUnavailable(
                f"{NO_LLM} Without an LLM only RAG requests (with index_name) can be answered, extractively.",
                status_code=503,
            )
        req, target, info = turn.req, turn.target, turn.info
        payload = req.upstream()
        if not payload.get("model") or target.model is None:
            name = await self.llm.model_name()
            if name:
                payload["model"] = name
            elif target.index_name:  # a rag:<index> alias means nothing upstream
                payload.pop("model", None)
        try:
            if req.stream:
                stream = await self.llm.open_stream(payload)
            else:
                result = await self.llm.chat(payload)
        except LLMUnavailable as exc:
            if fallback_nodes is None:
                raise
            return self._fallback(turn, exc, fallback_nodes, disclaim=disclaim)
        if req.stream:
            info.endpoint = stream.endpoint
            final = None
            if target.index_name:  # the caller asked for RAG: the last chunk says why it did not happen
                final = chunk("", payload.get("model") or "", int(time.time()), [], source_nodes=None,
                              generation_method="llm", rag=info.model_dump(exclude_none=True))
            chunks = disclaim_chunks(stream.__aiter__()) if disclaim else stream.__aiter__()
            return StreamOutcome(relay(
                chunks, completion_id=None, final=lambda: final,
                on_first=self._first_token_observer(turn.t0, stream, "passthrough"), on_close=stream.aclose,
            ))
        info.endpoint = result.endpoint
        out = result.body if isinstance(result.body, dict) else {"response": result.body}
        out.update(source_nodes=None, generation_method="llm", rag=info.model_dump(exclude_none=True))
        if disclaim:
            disclaim_body(out)
        return self._json(turn, out, "passthrough", llm_s=result.elapsed_s, endpoint=result.endpoint)

    # --- extractive fallback ----------------------------------------------------------------------
    def _fallback(self, turn: Turn, exc: LLMUnavailable, nodes: list, *, disclaim: bool = False
                  ) -> JSONOutcome | StreamOutcome:
        """Every endpoint failed or refused: the extractive answer (the reason in ``fallback_reason``), or
        the upstream error itself when ``extractive_fallback`` is off."""
        if not self.settings.extractive_fallback:
            raise exc
        LLM_FALLBACKS.labels("extractive").inc()
        tracing.annotate(**{"llm.fallback": "extractive"})
        return self._extractive(turn, nodes, exc.fallback_reason(), disclaim=disclaim)

    def _extractive(self, turn: Turn, nodes: list, reason: str, *, disclaim: bool = False
                    ) -> JSONOutcome | StreamOutcome:
        log.info("answering extractively: %s", reason)
        query = turn.info.query_used or split_messages(turn.req.messages).user_prompt
        text = extractive_answer(query, nodes) or NO_ANSWER
        return self._canned(turn, disclaimed(text) if disclaim else text, nodes,
                            method="extractive_fallback", mode="extractive", fallback=reason)

    def _canned(self, turn: Turn, text: str, nodes: list | None, *, method: str, mode: str,
                fallback: str | None = None) -> JSONOutcome | StreamOutcome:
        """An answer the engine writes itself (extractive, or the no-context refusal), as JSON or a stream."""
        req, t0 = turn.req, turn.t0
        n = req.n or 1
        sources = [node.to_source_node() for node in nodes or []] or None
        completion_id = new_completion_id()
        model = req.model or EXTRACTIVE_MODEL
        extra = {"source_nodes": sources, "generation_method": method, "fallback_reason": fallback,
                 "rag": turn.info.model_dump(exclude_none=True)}
        if fallback is None:
            del extra["fallback_reason"]
        if req.stream:
            tracing.annotate(**{"chat.mode": mode})
            final = chunk(completion_id, model, int(time.time()), [], **extra)
            on_first = lambda: RAG_TTFT_SECONDS.labels(mode).observe(time.perf_counter() - t0)  # noqa: E731
            return StreamOutcome(extractive_stream(text, completion_id=completion_id, model=model, n=n, final=final,
                                                   on_first=on_first))
        completion, prompt = estimate_tokens(text) * n, turn.info.prompt_tokens or 0
        out = ChatCompletionResponse(
            id=completion_id, model=model, source_nodes=sources, fallback_reason=fallback, generation_method=method,
            choices=[Choice(index=i, message=ChatMessage(role="assistant", content=text), finish_reason="stop")
                     for i in range(n)],
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion),
        ).model_dump(exclude={"rag", "guardrails"})
        out["rag"] = extra["rag"]  # only the fields that apply, as in every other answer
        return self._json(turn, out, mode)

    # --- helpers ----------------------------------------------------------------------------------
    def _json(self, turn: Turn, out: dict, mode: str, *, llm_s: float = 0.0, endpoint: str | None = None
              ) -> JSONOutcome:
        tracing.annotate(**{"chat.mode": mode})
        total = time.perf_counter() - turn.t0
        RAG_TTFT_SECONDS.labels(mode).observe(total)
        parts = [f"engine;dur={_ms(total - llm_s)}"]
        if endpoint is not None:
            LLM_TTFT_SECONDS.labels(endpoint).observe(llm_s)
            parts.append(f"llm;dur={_ms(llm_s)}")
        for name, seconds in turn.timing.items():
            parts.append(f"{name};dur={_ms(seconds)}")
        return JSONOutcome(out, {"Server-Timing": ", ".join(parts)})

    def _first_token_observer(self, t0: float, stream, mode: str):
        tracing.annotate(**{"chat.mode": mode})

        def observe() -> None:
            RAG_TTFT_SECONDS.labels(mode).observe(time.perf_counter() - t0)
            if stream.first_chunk_s is not None:
                LLM_TTFT_SECONDS.labels(stream.endpoint).observe(stream.first_chunk_s)
        return observe
